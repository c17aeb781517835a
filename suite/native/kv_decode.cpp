// One decode step of a Llama-style causal LM (Llama, Mistral, Qwen2) on the CPU in fp32:
// the kv sampler's `_forward` for one new token per row, with every op but the matmuls as a
// plain loop (no dispatcher round-trips, no temporaries per op). The matmuls stay at::linear
// (MKL/oneDNN). Built on first use by suite/native_decode.py (torch.utils.cpp_extension).
//
// Shapes: B rows, H hidden, nh query heads, nkv key/value heads, hd head dim, I MLP width.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>
#include <limits>
#include <vector>

using at::Tensor;

namespace {

enum Act : int64_t { SILU = 0, GELU = 1, GELU_TANH = 2, RELU = 3 };

// out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w   (HF's RMSNorm in fp32)   x, out: [rows, n]
void rmsnorm(const float* x, const float* w, float* out, int64_t rows, int64_t n, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / float(n) + float(eps));
    for (int64_t i = 0; i < n; ++i) o[i] = (xr[i] * inv) * w[i];
  }
}

// the MLP activation of the gate, by ATen's vectorized kernels (the eager step's own functions)
Tensor activate(const Tensor& g, int64_t act) {
  switch (act) {
    case SILU: return at::silu(g);
    case GELU: return at::gelu(g);
    case GELU_TANH: return at::gelu(g, "tanh");
    default: return at::relu(g);
  }
}

inline Tensor maybe(const Tensor& t) { return t.numel() ? t : Tensor(); }

}  // namespace

// ids, pos: int64 [B] (or [B, 1]); mask: bool [B, >= start+1] (1 = a real key); caches: per
// layer k then v, each contiguous fp32 [B, nkv, total, hd], written at slot `start`; layers:
// per layer (ln1, qkv_w, qkv_b, o_w, o_b, ln2, gu_w, gu_b, down_w, down_b), absent biases as
// empty tensors; cos, sin_signed: [positions, hd] (sin negated on the first half).
// Returns the logits [B, V] of the new token.
Tensor decode(Tensor ids, Tensor pos, Tensor mask, int64_t start, std::vector<Tensor> caches,
              std::vector<Tensor> layers, Tensor embed, Tensor norm_w, Tensor head, Tensor cos_t, Tensor sin_t,
              int64_t nh, int64_t nkv, int64_t hd, double eps, int64_t act) {
  TORCH_CHECK(embed.scalar_type() == at::kFloat && embed.device().is_cpu() && embed.is_contiguous() &&
              norm_w.is_contiguous() && head.is_contiguous(), "native decode: contiguous fp32 CPU weights only");
  ids = ids.reshape({-1}).contiguous();
  pos = pos.reshape({-1}).contiguous();
  const int64_t B = ids.size(0), H = embed.size(1), end = start + 1, half = hd / 2;
  TORCH_CHECK(nkv > 0 && nh % nkv == 0 && hd % 2 == 0, "native decode: heads ", nh, "/", nkv, ", head dim ", hd);
  const int64_t rep = nh / nkv;
  TORCH_CHECK(pos.size(0) == B && ids.scalar_type() == at::kLong && pos.scalar_type() == at::kLong,
              "native decode: ids and pos int64 [B]");
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = ids.data_ptr<int64_t>()[b], p = pos.data_ptr<int64_t>()[b];
    TORCH_CHECK(i >= 0 && i < embed.size(0), "native decode: token id ", i, " outside the vocabulary (", embed.size(0), ")");
    TORCH_CHECK(p >= 0 && p < cos_t.size(0), "native decode: position ", p, " outside the RoPE table (", cos_t.size(0), ")");
  }
  TORCH_CHECK(cos_t.is_contiguous() && sin_t.is_contiguous() && cos_t.size(1) == hd && sin_t.size(1) == hd,
              "native decode: RoPE tables [positions, head dim]");
  TORCH_CHECK(mask.dim() == 2 && mask.stride(1) == 1 && mask.scalar_type() == at::kBool && mask.size(0) == B &&
              mask.size(1) >= end, "native decode: mask bool [B, >= start + 1]");
  const int64_t nl = int64_t(layers.size()) / 10;
  TORCH_CHECK(int64_t(layers.size()) == 10 * nl && int64_t(caches.size()) == 2 * nl,
              "native decode: ten tensors and two caches per layer");
  for (const auto& c : caches)
    TORCH_CHECK(c.is_contiguous() && c.scalar_type() == at::kFloat && c.dim() == 4 && c.size(0) == B &&
                c.size(1) == nkv && c.size(2) >= end && c.size(3) == hd,
                "native decode: caches contiguous fp32 [B, nkv, >= start + 1, head dim]");
  for (int64_t l = 0; l < nl; ++l)
    TORCH_CHECK(layers[10 * l].is_contiguous() && layers[10 * l + 5].is_contiguous() &&
                layers[10 * l].numel() == H && layers[10 * l + 5].numel() == H &&
                layers[10 * l + 1].size(0) == (nh + 2 * nkv) * hd, "native decode: layer ", l, " weights");
  const int64_t qdim = nh * hd, kdim = nkv * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  auto opts = embed.options();
  Tensor x = at::empty({B, H}, opts), h = at::empty({B, H}, opts), o = at::empty({B, qdim}, opts);
  const int64_t* id = ids.data_ptr<int64_t>();
  const int64_t* ps = pos.data_ptr<int64_t>();
  const bool* mk = mask.data_ptr<bool>();
  const int64_t mstride = mask.stride(0);
  const float* cs = cos_t.data_ptr<float>();
  const float* sn = sin_t.data_ptr<float>();
  float* xp = x.data_ptr<float>();
  const float* ep = embed.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) std::copy(ep + id[b] * H, ep + (id[b] + 1) * H, xp + b * H);
  for (int64_t l = 0; l < nl; ++l) {
    const Tensor* L = layers.data() + 10 * l;
    Tensor& kc = caches[2 * l];
    Tensor& vc = caches[2 * l + 1];
    const int64_t total = kc.size(2);
    rmsnorm(xp, L[0].data_ptr<float>(), h.data_ptr<float>(), B, H, eps);
    Tensor qkv = at::linear(h, L[1], maybe(L[2]));  // [B, qdim + 2 kdim]
    float* qp = qkv.data_ptr<float>();
    const int64_t w3 = qdim + 2 * kdim;
    float* kcp = kc.data_ptr<float>();
    float* vcp = vc.data_ptr<float>();
    // RoPE on the q and k heads (x·cos + roll(x, hd/2)·sin_signed), then k and v into the cache
    for (int64_t b = 0; b < B; ++b) {
      const float* c = cs + ps[b] * hd;
      const float* s = sn + ps[b] * hd;
      float* row = qp + b * w3;
      for (int64_t j = 0; j < nh + nkv; ++j) {
        float* v = row + j * hd;
        for (int64_t d = 0; d < half; ++d) {
          const float a = v[d], e = v[d + half];
          v[d] = a * c[d] + e * s[d];
          v[d + half] = e * c[d + half] + a * s[d + half];
        }
      }
      for (int64_t g = 0; g < nkv; ++g) {
        const int64_t slot = ((b * nkv + g) * total + start) * hd;
        std::copy(row + qdim + g * hd, row + qdim + (g + 1) * hd, kcp + slot);
        std::copy(row + qdim + kdim + g * hd, row + qdim + kdim + (g + 1) * hd, vcp + slot);
      }
    }
    // attention of the new query over the real keys [0, end) of its row: scores by loops,
    // the softmax by ATen's vectorized kernel, the weighted sum of values by loops
    Tensor scores = at::empty({B * nh, end}, opts);
    float* scp = scores.data_ptr<float>();
    float* op = o.data_ptr<float>();
    const float ninf = -std::numeric_limits<float>::infinity();
    const int64_t grain = std::max<int64_t>(1, 262144 / (end * hd));
    at::parallel_for(0, B * nh, grain, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t b = p / nh, g = (p % nh) / rep;
        const float* q = qp + b * w3 + (p % nh) * hd;
        const float* kb = kcp + (b * nkv + g) * total * hd;
        const bool* m = mk + b * mstride;
        float* sc = scp + p * end;
        for (int64_t t = 0; t < end; ++t) {
          if (!m[t] && t != start) { sc[t] = ninf; continue; }
          const float* k = kb + t * hd;
          float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
          for (int64_t d = 0; d < hd; ++d) acc += q[d] * k[d];
          sc[t] = acc * scale;
        }
      }
    });
    scores = at::_softmax(scores, 1, false);
    scp = scores.data_ptr<float>();
    at::parallel_for(0, B * nh, grain, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t b = p / nh, g = (p % nh) / rep;
        const float* vb = vcp + (b * nkv + g) * total * hd;
        const float* pw = scp + p * end;
        float* out = op + b * qdim + (p % nh) * hd;
        std::fill(out, out + hd, 0.0f);
        for (int64_t t = 0; t < end; ++t) {
          if (pw[t] == 0.0f) continue;
          const float* v = vb + t * hd;
          const float w = pw[t];
#pragma omp simd
          for (int64_t d = 0; d < hd; ++d) out[d] += w * v[d];
        }
      }
    });
    x.add_(at::linear(o, L[3], maybe(L[4])));
    rmsnorm(xp, L[5].data_ptr<float>(), h.data_ptr<float>(), B, H, eps);
    Tensor gu = at::linear(h, L[6], maybe(L[7]));  // [B, 2I]: gate then up
    const int64_t I = gu.size(1) / 2;
    Tensor a = activate(gu.narrow(1, 0, I), act).mul_(gu.narrow(1, I, I));
    x.add_(at::linear(a, L[8], maybe(L[9])));
  }
  rmsnorm(xp, norm_w.data_ptr<float>(), h.data_ptr<float>(), B, H, eps);
  return at::linear(h, head);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("decode", &decode, "One fp32 decode step of a Llama-style model (see suite/native_decode.py)",
        py::call_guard<py::gil_scoped_release>());
}
