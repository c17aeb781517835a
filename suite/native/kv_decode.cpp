// The forward of a Llama-style causal LM (Llama, Mistral, Qwen2) on the CPU in fp32 for S new
// tokens per row over a KV cache (the kv sampler's `_forward`: S = 1 when decoding, the prompt
// in a prefill), with every op but the matmuls as a plain loop (no dispatcher round-trips, no
// temporaries per op), and the token loop of a rollout around it (`generate_loop`). Built on
// first use by suite/native_decode.py (torch.utils.cpp_extension).
//
// The matmuls run on copies of the weights the Python side makes once per weight sync
// (`packed`): where oneDNN serves, its inner product on weights packed in oneDNN's blocked
// layout ([out, in]; fp32, or bf16 for rollout.engine=native_bf16), called through the
// dispatcher (linear_packed); else MKL through at::mm_out / at::addmm_ on weights stored
// transposed ([in, out]) into buffers allocated once per call, the residual adds riding in the
// GEMM (beta = 1). Measured on the vs_trl shape (batch 32, hidden 128): the transposed layout
// takes 172 µs for a step's nine matmuls at 2 threads where at::linear on [out, in] weights took
// 287 µs; on SmolLM2-135M (batch 8, 1 thread) the packed one is what makes the step fast (the LM
// head 4.3 ms packed vs 14.0 through MKL, benchmarks/results/decode_bound_avx512.md).
//
// On x86 CPUs with AVX-512 (checked at run time; the file is compiled without -march, so one
// build serves every x86 CPU) the attention, the softmax and the SwiGLU activation are
// AVX-512 loops with their own exp (Cephes' expf polynomial, about 1 ulp); elsewhere (or with
// simd=false) they are plain loops, ATen's softmax and ATen's activation kernels. The
// attention splits its (row, head) pairs across torch's threads (at::parallel_for: the
// extension is built with -fopenmp on Linux and shares torch's OpenMP runtime; elsewhere
// at::parallel_for runs serially): it reads the whole KV cache each step, which at these
// sizes lives in L3, so two cores' caches and bandwidth halve it.
//
// Shapes: B sequences, S new tokens each, R = B·S rows, H hidden, nh query heads, nkv key/value
// heads, hd head dim, I MLP width.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)  // target_clones needs ELF's ifunc
#include <immintrin.h>
#define RLS_X86 1
#define AVX512 __attribute__((target("avx512f")))
// plain loops compiled twice, for AVX-512 and for any x86, picked at load time (ifunc)
#define CLONES __attribute__((target_clones("avx512f", "default")))
#else
#define CLONES
#endif

using at::Tensor;

namespace {

enum Act : int64_t { SILU = 0, GELU = 1, GELU_TANH = 2, RELU = 3 };

// out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w   (HF's RMSNorm in fp32)   x, out: [rows, n]
CLONES void rmsnorm(const float* x, const float* w, float* out, int64_t rows, int64_t n, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / float(n) + float(eps));
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = (xr[i] * inv) * w[i];
  }
}

// RoPE on the q and k heads of each row r = (b, i) of qkv [B·S, w3] (x·cos + roll(x, hd/2)·
// sin_signed, the tables' rows at the row's position), then its k and v heads into the caches
// of sequence b at slot start + i
CLONES void rope_and_cache(float* qp, int64_t w3, const float* cs, const float* sn, const int64_t* ps, int64_t B,
                           int64_t S, int64_t nh, int64_t nkv, int64_t hd, int64_t total, int64_t start, float* kcp,
                           float* vcp) {
  const int64_t half = hd / 2, qdim = nh * hd, kdim = nkv * hd;
  for (int64_t r = 0; r < B * S; ++r) {
    const int64_t b = r / S, slot0 = start + r % S;
    const float* c = cs + ps[r] * hd;
    const float* s = sn + ps[r] * hd;
    float* row = qp + r * w3;
    for (int64_t j = 0; j < nh + nkv; ++j) {
      float* v = row + j * hd;
#pragma omp simd
      for (int64_t d = 0; d < half; ++d) {
        const float p0 = v[d], p1 = v[d + half];
        v[d] = p0 * c[d] + p1 * s[d];
        v[d + half] = p1 * c[d + half] + p0 * s[d + half];
      }
    }
    for (int64_t g = 0; g < nkv; ++g) {
      const int64_t slot = ((b * nkv + g) * total + slot0) * hd;
      std::copy(row + qdim + g * hd, row + qdim + (g + 1) * hd, kcp + slot);
      std::copy(row + qdim + kdim + g * hd, row + qdim + kdim + (g + 1) * hd, vcp + slot);
    }
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

// x @ W^T (+ bias) through oneDNN's inner product on a weight packed by
// torch.ops.mkldnn._reorder_linear_weight ([out, in], oneDNN's blocked layout): the op the
// onednn engine calls from Python, here through the dispatcher (boxed: its Scalar?[] argument).
// A bf16 weight (rollout.engine=native_bf16) takes x and the bias cast to bf16 and gives its
// bf16 output back as fp32.
Tensor linear_packed(const Tensor& x, const Tensor& wp, const Tensor& bias) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  const bool bf16 = wp.scalar_type() == at::kBFloat16;
  std::vector<c10::IValue> stack{c10::IValue(bf16 ? x.to(at::kBFloat16) : x), c10::IValue(wp),
                                 bias.numel() ? c10::IValue(bf16 ? bias.to(at::kBFloat16) : bias) : c10::IValue(),
                                 c10::IValue(std::string("none")),
                                 c10::IValue(c10::List<c10::optional<at::Scalar>>()),
                                 c10::IValue(std::string(""))};
  op.callBoxed(&stack);
  return bf16 ? stack[0].toTensor().to(at::kFloat) : stack[0].toTensor();
}

// y = x @ wt (+ bias); y += x @ wt (+ bias) when `accumulate`   x [R, in], wt [in, out]; with
// `packed`, w is oneDNN-packed [out, in] (linear_packed) and the bias rides in the op
void matmul(Tensor& y, const Tensor& x, const Tensor& wt, const Tensor& bias, bool accumulate, bool packed) {
  if (packed) {
    Tensor r = linear_packed(x, wt, bias);
    if (accumulate)
      y.add_(r);
    else
      y.copy_(r);
    return;
  }
  if (accumulate)
    y.addmm_(x, wt);
  else
    at::mm_out(y, x, wt);
  if (bias.numel()) y.add_(bias);
}

// (row, head) pairs per thread chunk: about 16k multiply-adds of q·k and p·v, so that a small
// step's attention stays on one thread (a parallel region costs a few µs)
inline int64_t attention_grain(int64_t end, int64_t hd) { return std::max<int64_t>(1, 8192 / (end * hd)); }

// Attention of the query of row r = (b, i) (slot start + i of sequence b), per head, over the
// keys [0, start + i] of its sequence that are real (mask) or its own: plain loops and ATen's
// softmax. qp: [B·S, w3] (q heads first), caches [B, nkv, total, hd], out [B·S, nh·hd].
void attend_generic(const float* qp, int64_t w3, const float* kcp, const float* vcp, const bool* mk,
                    int64_t mstride, int64_t B, int64_t S, int64_t nh, int64_t rep, int64_t nkv, int64_t total,
                    int64_t start, int64_t hd, float scale, float* op, const at::TensorOptions& opts) {
  const int64_t width = start + S, qdim = nh * hd;
  const float ninf = -std::numeric_limits<float>::infinity();
  Tensor scores = at::full({B * S * nh, width}, ninf, opts);  // keys past a query's own: -inf
  float* scp = scores.data_ptr<float>();
  const int64_t grain = attention_grain(width, hd);
  at::parallel_for(0, B * S * nh, grain, [&](int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t r = p / nh, b = r / S, self = start + r % S, g = (p % nh) / rep;
    const float* q = qp + r * w3 + (p % nh) * hd;
    const float* kb = kcp + (b * nkv + g) * total * hd;
    const bool* m = mk + b * mstride;
    float* sc = scp + p * width;
    for (int64_t t = 0; t <= self; ++t) {
      if (!m[t] && t != self) { sc[t] = ninf; continue; }
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
  at::parallel_for(0, B * S * nh, grain, [&](int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t r = p / nh, b = r / S, self = start + r % S, g = (p % nh) / rep;
    const float* vb = vcp + (b * nkv + g) * total * hd;
    const float* pw = scp + p * width;
    float* out = op + r * qdim + (p % nh) * hd;
    std::fill(out, out + hd, 0.0f);
    for (int64_t t = 0; t <= self; ++t) {
      if (pw[t] == 0.0f) continue;
      const float* v = vb + t * hd;
      const float w = pw[t];
#pragma omp simd
      for (int64_t d = 0; d < hd; ++d) out[d] += w * v[d];
    }
  }
  });
}

#ifdef RLS_X86
bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

inline __mmask16 tail_mask(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }

// e^x for 16 floats: Cephes' expf (range reduction by ln 2, degree-6 polynomial, about 1 ulp);
// exactly 0 below e^-87.3 (so a masked key, -inf, gets weight 0 as in the softmax), +inf above
// e^88.4, NaN stays NaN (a diverged run shows as NaN logits, as in the eager step)
AVX512 inline __m512 exp16(__m512 x) {
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_LT_OQ);
  const __mmask16 huge = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.37626f), _CMP_GT_OQ);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512 in = x;
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.37626f)), _mm512_set1_ps(-87.33654f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  __m512 e = _mm512_maskz_mov_ps(__mmask16(~tiny), _mm512_scalef_ps(p, n));
  e = _mm512_mask_mov_ps(e, huge, _mm512_set1_ps(std::numeric_limits<float>::infinity()));
  return _mm512_mask_mov_ps(e, nan, in);
}

AVX512 inline __m256 halves(__m512 a) {  // lanes i + lanes 8 + i
  return _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}

// the sums of four vectors' lanes: [Σa0, Σa1, Σa2, Σa3]
AVX512 inline __m128 sum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(halves(a0), halves(a1)), _mm256_hadd_ps(halves(a2), halves(a3)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// attend_generic with AVX-512 for the (row, head) pairs [p0, p1): dot products over the head
// dim, the softmax (max, exp, sum) over the keys, the weighted sum of values over the head dim
AVX512 void attend_pairs_avx512(int64_t p0, int64_t p1, const float* qp, int64_t w3, const float* kcp,
                                const float* vcp, const bool* mk, int64_t mstride, int64_t S, int64_t nh, int64_t rep,
                                int64_t nkv, int64_t total, int64_t start, int64_t hd, float scale, float* op) {
  const int64_t qdim = nh * hd;
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> scratch(start + S + 16);
  float* sc = scratch.data();
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t r = p / nh, b = r / S, self = start + r % S, end = self + 1, g = (p % nh) / rep;
    const float* q = qp + r * w3 + (p % nh) * hd;
    const float* kb = kcp + (b * nkv + g) * total * hd;
    const bool* m = mk + b * mstride;
    // q·k for four keys at a time (one horizontal sum for the four), then the rest one by one
    int64_t t = 0;
    for (; t + 4 <= end; t += 4) {
      const float* k = kb + t * hd;
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t d = 0; d < hd; d += 16) {
        const __mmask16 dm = tail_mask(hd - d);
        const __m512 qv = _mm512_maskz_loadu_ps(dm, q + d);
        a0 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(dm, k + d), a0);
        a1 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(dm, k + hd + d), a1);
        a2 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(dm, k + 2 * hd + d), a2);
        a3 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(dm, k + 3 * hd + d), a3);
      }
      _mm_storeu_ps(sc + t, _mm_mul_ps(sum4(a0, a1, a2, a3), _mm_set1_ps(scale)));
    }
    for (; t < end; ++t) {
      const float* k = kb + t * hd;
      __m512 acc = _mm512_setzero_ps();
      for (int64_t d = 0; d < hd; d += 16) {
        const __mmask16 dm = tail_mask(hd - d);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(dm, q + d), _mm512_maskz_loadu_ps(dm, k + d), acc);
      }
      sc[t] = _mm512_reduce_add_ps(acc) * scale;
    }
    float mx = ninf;
    for (t = 0; t < end; ++t) {
      if (!m[t] && t != self) sc[t] = ninf;  // padding: computed, then masked
      mx = std::isnan(sc[t]) ? sc[t] : std::max(mx, sc[t]);
    }
    const __m512 vmx = _mm512_set1_ps(mx);
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t t = 0; t < end; t += 16) {
      const __mmask16 tm = tail_mask(end - t);
      const __m512 e = exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(ninf), tm, sc + t), vmx));
      _mm512_mask_storeu_ps(sc + t, tm, e);
      vsum = _mm512_add_ps(vsum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
    const float* vb = vcp + (b * nkv + g) * total * hd;
    float* out = op + r * qdim + (p % nh) * hd;
    for (int64_t d = 0; d < hd; d += 16) {
      const __mmask16 dm = tail_mask(hd - d);
      __m512 acc = _mm512_setzero_ps();
      for (int64_t t = 0; t < end; ++t) {
        if (sc[t] == 0.0f) continue;
        acc = _mm512_fmadd_ps(_mm512_set1_ps(sc[t]), _mm512_maskz_loadu_ps(dm, vb + t * hd + d), acc);
      }
      _mm512_mask_storeu_ps(out + d, dm, _mm512_mul_ps(acc, inv));
    }
  }
}

// attend_generic with AVX-512, the (row, head) pairs split across torch's threads
void attend_avx512(const float* qp, int64_t w3, const float* kcp, const float* vcp, const bool* mk, int64_t mstride,
                   int64_t B, int64_t S, int64_t nh, int64_t rep, int64_t nkv, int64_t total, int64_t start,
                   int64_t hd, float scale, float* op) {
  at::parallel_for(0, B * S * nh, attention_grain(start + S, hd), [&](int64_t p0, int64_t p1) {
    attend_pairs_avx512(p0, p1, qp, w3, kcp, vcp, mk, mstride, S, nh, rep, nkv, total, start, hd, scale, op);
  });
}

// a[r, i] = silu(gu[r, i]) * gu[r, I + i]   gu [R, 2I] (gate then up), a [R, I]
AVX512 void swiglu_avx512(const float* gu, int64_t R, int64_t I, float* a) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t r = 0; r < R; ++r) {
    const float* g = gu + r * 2 * I;
    const float* u = g + I;
    float* o = a + r * I;
    for (int64_t i = 0; i < I; i += 16) {
      const __mmask16 m = tail_mask(I - i);
      const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
      const __m512 s = _mm512_div_ps(x, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
      _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + i)));
    }
  }
}
#else
bool has_avx512() { return false; }
#endif

}  // namespace

// ids, pos: int64 [B, S] (or [B]: S = 1), the tokens of slots start..start+S-1; mask: bool
// [B, >= start+S] (1 = a real key; a query always sees itself and never a later slot); caches:
// per layer k then v, each contiguous fp32 [B, nkv, total, hd], written at those slots; layers:
// per layer (ln1, qkv_t, qkv_b, o_t, o_b, ln2, gu_t, gu_b, down_t, down_b) with the projection
// weights transposed ([in, out], contiguous) and absent biases as empty tensors; head_t
// [H, V]; cos, sin_signed: [positions, hd] (sin negated on the first half). simd: use the
// AVX-512 loops where the CPU has them. Returns the logits [B, V] of the last of the S tokens.
Tensor decode_impl(Tensor ids, Tensor pos, const Tensor& mask, int64_t start, std::vector<Tensor>& caches,
                   const std::vector<Tensor>& layers, const Tensor& embed, const Tensor& norm_w, const Tensor& head_t,
                   const Tensor& cos_t, const Tensor& sin_t, int64_t nh, int64_t nkv, int64_t hd, double eps,
                   int64_t act, bool simd, bool packed) {
  TORCH_CHECK(embed.scalar_type() == at::kFloat && embed.device().is_cpu() && embed.is_contiguous() &&
              norm_w.is_contiguous() && (packed || head_t.is_contiguous()), "native decode: contiguous fp32 CPU weights only");
  if (ids.dim() == 1) ids = ids.unsqueeze(1);
  TORCH_CHECK(ids.dim() == 2 && ids.scalar_type() == at::kLong && pos.scalar_type() == at::kLong &&
              pos.numel() == ids.numel(), "native decode: ids and pos int64 [B, S]");
  const int64_t B = ids.size(0), S = ids.size(1), R = B * S, H = embed.size(1), end = start + S;
  ids = ids.reshape({-1}).contiguous();
  pos = pos.reshape({-1}).contiguous();
  TORCH_CHECK(nkv > 0 && nh % nkv == 0 && hd % 2 == 0, "native decode: heads ", nh, "/", nkv, ", head dim ", hd);
  const int64_t rep = nh / nkv;
  for (int64_t b = 0; b < R; ++b) {
    const int64_t i = ids.data_ptr<int64_t>()[b], p = pos.data_ptr<int64_t>()[b];
    TORCH_CHECK(i >= 0 && i < embed.size(0), "native decode: token id ", i, " outside the vocabulary (", embed.size(0), ")");
    TORCH_CHECK(p >= 0 && p < cos_t.size(0), "native decode: position ", p, " outside the RoPE table (", cos_t.size(0), ")");
  }
  TORCH_CHECK(cos_t.is_contiguous() && sin_t.is_contiguous() && cos_t.scalar_type() == at::kFloat &&
              sin_t.scalar_type() == at::kFloat && cos_t.size(1) == hd && sin_t.size(1) == hd &&
              sin_t.size(0) == cos_t.size(0), "native decode: RoPE tables fp32 [positions, head dim]");
  TORCH_CHECK(norm_w.numel() == H && norm_w.scalar_type() == at::kFloat, "native decode: final norm [hidden]");
  TORCH_CHECK(mask.dim() == 2 && mask.stride(1) == 1 && mask.scalar_type() == at::kBool && mask.size(0) == B &&
              mask.size(1) >= end, "native decode: mask bool [B, >= start + S]");
  const int64_t nl = int64_t(layers.size()) / 10;
  TORCH_CHECK(int64_t(layers.size()) == 10 * nl && int64_t(caches.size()) == 2 * nl,
              "native decode: ten tensors and two caches per layer");
  for (const auto& c : caches)
    TORCH_CHECK(c.is_contiguous() && c.scalar_type() == at::kFloat && c.dim() == 4 && c.size(0) == B &&
                c.size(1) == nkv && c.size(2) >= end && c.size(3) == hd,
                "native decode: caches contiguous fp32 [B, nkv, >= start + S, head dim]");
  const int64_t qdim = nh * hd, kdim = nkv * hd, w3 = qdim + 2 * kdim;
  const int64_t I2 = nl ? layers[6].size(packed ? 0 : 1) : 0;
  for (int64_t l = 0; l < nl; ++l) {
    const Tensor* L = layers.data() + 10 * l;
    auto io = [packed](int64_t in, int64_t out) {  // [in, out] transposed, [out, in] packed
      return packed ? std::vector<int64_t>{out, in} : std::vector<int64_t>{in, out};
    };
    TORCH_CHECK(L[0].is_contiguous() && L[5].is_contiguous() && L[0].numel() == H && L[5].numel() == H &&
                L[1].sizes() == at::IntArrayRef(io(H, w3)) && L[3].sizes() == at::IntArrayRef(io(qdim, H)) &&
                L[6].sizes() == at::IntArrayRef(io(H, I2)) && L[8].sizes() == at::IntArrayRef(io(I2 / 2, H)) &&
                I2 % 2 == 0, "native decode: layer ", l, " weights ([in, out]; packed: [out, in])");
    const int64_t widths[] = {w3, H, I2, H};  // the biases of qkv, o, gate/up, down: empty or [out]
    const int64_t at_[] = {2, 4, 7, 9};
    for (int j = 0; j < 4; ++j)
      TORCH_CHECK(L[at_[j]].numel() == 0 || (L[at_[j]].numel() == widths[j] && L[at_[j]].scalar_type() == at::kFloat),
                  "native decode: layer ", l, " bias ", at_[j], " of ", L[at_[j]].numel(), " values (want 0 or ",
                  widths[j], ")");
  }
  TORCH_CHECK(head_t.dim() == 2 && head_t.size(packed ? 1 : 0) == H,
              "native decode: head [hidden, vocabulary] (packed: [vocabulary, hidden])");
  const bool vec = simd && has_avx512();
  const float scale = 1.0f / std::sqrt(float(hd));
  auto opts = embed.options();
  Tensor x = at::empty({R, H}, opts), h = at::empty({R, H}, opts), o = at::empty({R, qdim}, opts);
  Tensor qkv = at::empty({R, w3}, opts), gu = at::empty({R, I2}, opts), a = at::empty({R, I2 / 2}, opts);
  const int64_t* id = ids.data_ptr<int64_t>();
  const int64_t* ps = pos.data_ptr<int64_t>();
  const bool* mk = mask.data_ptr<bool>();
  const int64_t mstride = mask.stride(0);
  const float* cs = cos_t.data_ptr<float>();
  const float* sn = sin_t.data_ptr<float>();
  float* xp = x.data_ptr<float>();
  float* qp = qkv.data_ptr<float>();
  const float* ep = embed.data_ptr<float>();
  for (int64_t r = 0; r < R; ++r) std::copy(ep + id[r] * H, ep + (id[r] + 1) * H, xp + r * H);
  for (int64_t l = 0; l < nl; ++l) {
    const Tensor* L = layers.data() + 10 * l;
    Tensor& kc = caches[2 * l];
    Tensor& vc = caches[2 * l + 1];
    const int64_t total = kc.size(2);
    rmsnorm(xp, L[0].data_ptr<float>(), h.data_ptr<float>(), R, H, eps);
    matmul(qkv, h, L[1], L[2], false, packed);  // [R, qdim + 2 kdim]
    float* kcp = kc.data_ptr<float>();
    float* vcp = vc.data_ptr<float>();
    rope_and_cache(qp, w3, cs, sn, ps, B, S, nh, nkv, hd, total, start, kcp, vcp);
#ifdef RLS_X86
    if (vec)
      attend_avx512(qp, w3, kcp, vcp, mk, mstride, B, S, nh, rep, nkv, total, start, hd, scale, o.data_ptr<float>());
    else
#endif
      attend_generic(qp, w3, kcp, vcp, mk, mstride, B, S, nh, rep, nkv, total, start, hd, scale, o.data_ptr<float>(),
                     opts);
    matmul(x, o, L[3], L[4], true, packed);  // x += o @ o_t (+ bias)
    rmsnorm(xp, L[5].data_ptr<float>(), h.data_ptr<float>(), R, H, eps);
    matmul(gu, h, L[6], L[7], false, packed);  // [R, 2I]: gate then up
    const int64_t I = I2 / 2;
#ifdef RLS_X86
    if (vec && act == SILU)
      swiglu_avx512(gu.data_ptr<float>(), R, I, a.data_ptr<float>());
    else
#endif
      at::mul_out(a, activate(gu.narrow(1, 0, I), act), gu.narrow(1, I, I));
    matmul(x, a, L[8], L[9], true, packed);  // x += a @ down_t (+ bias)
  }
  // the last token of each sequence: rows S-1, 2S-1, ...
  Tensor last = S == 1 ? x : x.view({B, S, H}).select(1, S - 1).contiguous();
  Tensor hl = at::empty({B, H}, opts);
  rmsnorm(last.data_ptr<float>(), norm_w.data_ptr<float>(), hl.data_ptr<float>(), B, H, eps);
  return packed ? linear_packed(hl, head_t, Tensor()) : at::mm(hl, head_t);
}

Tensor decode(Tensor ids, Tensor pos, Tensor mask, int64_t start, std::vector<Tensor> caches,
              std::vector<Tensor> layers, Tensor embed, Tensor norm_w, Tensor head_t, Tensor cos_t, Tensor sin_t,
              int64_t nh, int64_t nkv, int64_t hd, double eps, int64_t act, bool simd, bool packed) {
  return decode_impl(ids, pos, mask, start, caches, layers, embed, norm_w, head_t, cos_t, sin_t, nh, nkv, hd, eps,
                     act, simd, packed);
}

// The token loop of KVSampler._decode for the common case (noise from a torch.Generator or
// greedy, no top-p/top-k truncation, no stop strings, no top-K outputs, no attention
// statistic), the same ATen ops in the same order as sample_step and _TensorTracker, so it
// samples exactly what the Python loop over this decode step samples. logits [B, V] of the
// last prompt position; next_pos [B, 1]; mask bool [B, W + n_new] (1 = a real key); limits
// int64 [B]; stop int64 [S]. Returns (tokens int64 [B, n_new], logp float [B, n_new], count
// int64 [B], eos bool [B]): row b's tokens are the first count[b] entries.
std::vector<Tensor> generate_loop(Tensor logits, Tensor next_pos, Tensor mask, int64_t W, int64_t n_new,
                                  Tensor limits, Tensor stop, double temperature, c10::optional<at::Generator> gen,
                                  double compact_frac, std::vector<Tensor> caches, std::vector<Tensor> layers,
                                  Tensor embed, Tensor norm_w, Tensor head_t, Tensor cos_t, Tensor sin_t, int64_t nh,
                                  int64_t nkv, int64_t hd, double eps, int64_t act, bool simd, bool packed) {
  const int64_t B = logits.size(0);
  TORCH_CHECK(logits.dim() == 2 && limits.numel() == B && next_pos.numel() == B && mask.size(0) == B &&
              mask.size(1) >= W + n_new && mask.scalar_type() == at::kBool && mask.is_contiguous(),
              "native generate: logits [B, V], next_pos [B, 1], limits [B], mask bool [B, W + n_new]");
  limits = limits.to(at::kLong).contiguous();
  stop = stop.to(at::kLong).contiguous();
  Tensor toks = at::zeros({B, std::max<int64_t>(n_new, 0)}, limits.options());
  Tensor lps = at::zeros({B, std::max<int64_t>(n_new, 0)}, logits.options().dtype(at::kFloat));
  Tensor count = at::zeros({B}, limits.options());
  Tensor eos = at::zeros({B}, limits.options().dtype(at::kBool));
  std::vector<char> done(B);
  const int64_t* lim = limits.data_ptr<int64_t>();
  const int64_t* st = stop.data_ptr<int64_t>();
  const int64_t ns = stop.numel();
  for (int64_t b = 0; b < B; ++b) done[b] = lim[b] <= 0;
  int64_t* cnt = count.data_ptr<int64_t>();
  bool* eo = eos.data_ptr<bool>();
  Tensor rows;  // the rows the decode computes (undefined: all B)
  for (int64_t i = 0; i < n_new; ++i) {
    // sample_step
    Tensor tok, lp;
    if (temperature == 0) {
      Tensor logp_all = at::log_softmax(logits.to(at::kFloat), -1);
      tok = logits.argmax(-1);
      lp = logp_all.gather(-1, tok.unsqueeze(1)).squeeze(-1);
    } else {
      Tensor scaled = logits.to(at::kFloat);
      if (temperature != 1.0) scaled = scaled / temperature;
      Tensor logp_all = at::log_softmax(scaled, -1);
      Tensor u = at::rand(logp_all.sizes(), gen, logp_all.options());
      tok = (logp_all - u.clamp_(1e-20, 1.0).log_().neg_().log_()).argmax(-1);
      lp = logp_all.gather(-1, tok.unsqueeze(1)).squeeze(-1);
    }
    tok = tok.contiguous();
    lp = lp.contiguous();
    // _TensorTracker.add
    const int64_t* tp = tok.data_ptr<int64_t>();
    const float* lpp = lp.data_ptr<float>();
    int64_t* tt = toks.data_ptr<int64_t>();
    float* ll = lps.data_ptr<float>();
    int64_t n_live = 0;
    for (int64_t b = 0; b < B; ++b) {
      tt[b * n_new + i] = tp[b];
      ll[b * n_new + i] = lpp[b];
      if (done[b]) continue;
      cnt[b] += 1;
      bool hit = false;
      for (int64_t j = 0; j < ns; ++j) hit = hit || tp[b] == st[j];
      if (hit) eo[b] = true;
      done[b] = hit || cnt[b] >= lim[b];
      n_live += !done[b];
    }
    if (i == n_new - 1 || n_live == 0) break;
    const int64_t n_rows = rows.defined() ? rows.numel() : B;
    if (n_rows - n_live >= std::max<int64_t>(1, int64_t(compact_frac * double(n_rows)))) {  // drop finished rows
      std::vector<int64_t> keep;
      for (int64_t r = 0; r < n_rows; ++r) {
        const int64_t b = rows.defined() ? rows.data_ptr<int64_t>()[r] : r;
        if (!done[b]) keep.push_back(r);
      }
      Tensor k = at::tensor(keep, limits.options());
      rows = rows.defined() ? rows.index_select(0, k) : k;
      for (auto& c : caches) c = c.index_select(0, k);
      mask = mask.index_select(0, k);
      next_pos = next_pos.index_select(0, k);
    }
    Tensor step_ids = rows.defined() ? tok.index_select(0, rows) : tok;
    Tensor out = decode_impl(step_ids, next_pos, mask, W + i, caches, layers, embed, norm_w, head_t, cos_t, sin_t,
                             nh, nkv, hd, eps, act, simd, packed);
    // finished rows keep stale logits: sampled, never recorded
    logits = rows.defined() ? logits.index_copy(0, rows, out) : out;
    next_pos = next_pos + 1;
  }
  return {toks, lps, count, eos};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("generate_loop", &generate_loop, "The token loop of a rollout (see suite/native_decode.py)",
        py::call_guard<py::gil_scoped_release>());
  m.def("decode", &decode, "The fp32 forward of S new tokens a row of a Llama-style model (see suite/native_decode.py)",
        py::call_guard<py::gil_scoped_release>());
  m.def("has_avx512", &has_avx512, "Whether this CPU runs the AVX-512 loops");
}
