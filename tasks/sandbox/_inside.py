"""The part of the sandbox that runs *inside* it: the zygote server and the per-program child.

This file is standalone (standard library only) because it is executed as
``python -S -s -B -c <this source> <config dict literal>`` by an interpreter that may not see the
repository (inside bubblewrap only ``/usr``, the interpreter's prefix and a tmpfs exist).
The host (:mod:`tasks.sandbox`) also imports it for detection.

The zygote reads length-prefixed JSON jobs on stdin and answers on stdout. Per job it forks
a child that, before running the program:

1. starts a new session (its own process group), asks for SIGKILL if the zygote dies;
2. enters a fresh scratch directory; stdin = /dev/null, stdout/stderr = a pipe read by the
   zygote, every other descriptor closed except a status pipe (fd 3);
3. sets rlimits (CPU, address space, file size, open files, core = 0, processes);
4. drops privileges: ``setuid`` to the worker's uid (uid layer), else all capabilities;
5. sets no_new_privs, applies Landlock (landlock layer) and a seccomp filter.

The program runs with ``exec`` in the child's ``__main__`` namespace. It *passed* when the
``exec`` returned normally: only then does the child write a per-job random token to the
status pipe. ``exit(0)``, ``os._exit(0)`` or a signal are therefore failures, which defeats
the usual "exit early with status 0" reward hack (a program that reads the grader's stack
frames could still forge it; the sandbox protects the machine, not that).

After the child exits (or is killed at the timeout), the zygote kills what it left behind:
``kill(-1)`` inside a private pid namespace (bwrap) or as the dedicated uid (uid layer);
elsewhere the seccomp filter forbids creating processes, so the process group is enough.
"""

import ctypes
import errno
import os
import resource
import select
import struct
import sys
import time

# ---------------------------------------------------------------------------------------
# prctl / capabilities

SIGKILL = 9  # (the signal module imports enum: +4 ms per fresh interpreter)

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)  # the interpreter's own libc (no ldconfig call)
        _libc.syscall.restype = ctypes.c_long
        _libc.prctl.restype = ctypes.c_int
    return _libc


def prctl(option, a2=0, a3=0, a4=0, a5=0):
    r = libc().prctl(ctypes.c_int(option), ctypes.c_ulong(a2), ctypes.c_ulong(a3), ctypes.c_ulong(a4),
                     ctypes.c_ulong(a5))
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"prctl({option}): {os.strerror(e)}")
    return r


ARCH = os.uname().machine
# syscall numbers: x86_64 / aarch64 (the two architectures the seccomp filter supports)
_NR = {
    "x86_64": dict(capset=126, socket=41, fork=57, vfork=58, clone=56, clone3=435, kill=62, tkill=200, tgkill=234,
                   rt_sigqueueinfo=129, rt_tgsigqueueinfo=297, pidfd_open=434, pidfd_send_signal=424,
                   pidfd_getfd=438, ptrace=101, process_vm_readv=310, process_vm_writev=311, mount=165,
                   umount2=166, unshare=272, setns=308, io_uring_setup=425, io_uring_enter=426,
                   io_uring_register=427, bpf=321, perf_event_open=298, userfaultfd=323, keyctl=250,
                   add_key=248, request_key=249, chroot=161, pivot_root=155, open_tree=428, move_mount=429,
                   fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442, init_module=175,
                   finit_module=313, delete_module=176, kexec_load=246, kexec_file_load=320, reboot=169,
                   swapon=167, swapoff=168, acct=163, settimeofday=164, clock_settime=227, quotactl=179,
                   syslog=103, vhangup=153, name_to_handle_at=303, open_by_handle_at=304, iopl=172,
                   ioperm=173, setrlimit=160, prlimit64=302, personality=135, shmget=29, shmat=30, shmctl=31,
                   semget=64, semop=65, semctl=66, msgget=68, msgsnd=69, msgrcv=70, msgctl=71, semtimedop=220,
                   mq_open=240),
    "aarch64": dict(capset=91, socket=198, clone=220, clone3=435, kill=129, tkill=130, tgkill=131,
                    rt_sigqueueinfo=138, rt_tgsigqueueinfo=240, pidfd_open=434, pidfd_send_signal=424,
                    pidfd_getfd=438, ptrace=117, process_vm_readv=270, process_vm_writev=271, mount=40,
                    umount2=39, unshare=97, setns=268, io_uring_setup=425, io_uring_enter=426,
                    io_uring_register=427, bpf=280, perf_event_open=241, userfaultfd=282, keyctl=219,
                    add_key=217, request_key=218, chroot=51, pivot_root=41, open_tree=428, move_mount=429,
                    fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442, init_module=105,
                    finit_module=273, delete_module=106, kexec_load=104, kexec_file_load=294, reboot=142,
                    swapon=224, swapoff=225, acct=89, settimeofday=170, clock_settime=112, quotactl=60,
                    syslog=116, vhangup=58, name_to_handle_at=264, open_by_handle_at=265, setrlimit=164,
                    prlimit64=261, personality=92, shmget=194, shmat=196, shmctl=195, semget=190, semop=193,
                    semctl=191, msgget=186, msgsnd=189, msgrcv=188, msgctl=187, semtimedop=192, mq_open=180),
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def drop_capabilities():
    """Empty the effective/permitted/inheritable sets and the bounding set (root without a
    uid switch: it can then no longer raise rlimits, bypass file modes or mount)."""
    for cap in range(64):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError:
            break
    header = struct.pack("II", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    hdr = ctypes.create_string_buffer(header)
    data = ctypes.create_string_buffer(24)  # two zeroed __user_cap_data_struct
    if libc().syscall(_NR[ARCH]["capset"], hdr, data) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"capset: {os.strerror(e)}")


# ---------------------------------------------------------------------------------------
# Landlock (https://docs.kernel.org/userspace-api/landlock.html)

LL_CREATE, LL_ADD_RULE, LL_RESTRICT = 444, 445, 446  # the same numbers on every architecture
LL_VERSION_FLAG = 1
LL_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_TRUNCATE, FS_IOCTL_DEV = 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi():
    """The kernel's Landlock ABI version (0 = unavailable)."""
    try:
        r = libc().syscall(LL_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(LL_VERSION_FLAG))
    except Exception:  # noqa: BLE001
        return 0
    return max(0, int(r))


def _fs_mask(abi):
    mask = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        mask |= 1 << 13  # REFER
    if abi >= 3:
        mask |= FS_TRUNCATE
    if abi >= 5:
        mask |= FS_IOCTL_DEV
    return mask


def apply_landlock(read_paths, write_paths, file_rw=()):
    """Restrict this process (and its future children) to reading ``read_paths``, full
    access beneath ``write_paths``, read/write of the files ``file_rw``; no TCP bind or
    connect (ABI ≥ 4); no signals or abstract unix sockets outside the domain (ABI ≥ 6).
    Returns the ABI used. Raises OSError if the kernel refuses."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError(errno.ENOSYS, "Landlock is not available")
    fs = _fs_mask(abi)
    fields = [fs]
    if abi >= 4:
        fields.append(NET_BIND_TCP | NET_CONNECT_TCP)
    if abi >= 6:
        fields.append(SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL)
    attr = ctypes.create_string_buffer(struct.pack("Q" * len(fields), *fields))
    lc = libc()
    rs = lc.syscall(LL_CREATE, attr, ctypes.c_size_t(len(attr.raw)), ctypes.c_uint32(0))
    if rs < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"landlock_create_ruleset: {os.strerror(e)}")
    file_rights = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | (fs & (FS_TRUNCATE | FS_IOCTL_DEV))
    try:
        rules = [(p, FS_EXECUTE | FS_READ_FILE | FS_READ_DIR) for p in read_paths]
        rules += [(p, fs) for p in write_paths]
        rules += [(p, FS_READ_FILE | FS_WRITE_FILE) for p in file_rw]
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a missing optional path is simply not allowed
            try:
                if not os.path.isdir(path):
                    rights &= file_rights
                rule = _PathBeneath(rights & fs, fd)
                if lc.syscall(LL_ADD_RULE, ctypes.c_int(rs), ctypes.c_int(LL_RULE_PATH_BENEATH),
                              ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, f"landlock_add_rule({path}): {os.strerror(e)}")
            finally:
                os.close(fd)
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        if lc.syscall(LL_RESTRICT, ctypes.c_int(rs), ctypes.c_uint32(0)) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"landlock_restrict_self: {os.strerror(e)}")
    finally:
        os.close(rs)
    return abi


# ---------------------------------------------------------------------------------------
# seccomp-bpf

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
RET_ALLOW = 0x7FFF0000
RET_KILL = 0x80000000  # SECCOMP_RET_KILL_PROCESS


def _ret_errno(e):
    return 0x00050000 | e


CLONE_THREAD = 0x00010000
CLONE_NS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80
_NETWORK_AND_KERNEL = ("socket", "mount", "umount2", "unshare", "setns", "io_uring_setup", "io_uring_enter",
                       "io_uring_register", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key",
                       "request_key", "chroot", "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig",
                       "fsmount", "fspick", "mount_setattr", "init_module", "finit_module", "delete_module",
                       "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "settimeofday",
                       "clock_settime", "quotactl", "syslog", "vhangup", "name_to_handle_at",
                       "open_by_handle_at", "iopl", "ioperm", "personality")
_ALWAYS = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
           "tkill", "rt_tgsigqueueinfo",
           # System V IPC and POSIX message queues outlive the program and (outside bwrap) live in
           # the host's IPC namespace, where they could reach other processes' segments
           "shmget", "shmat", "shmctl", "semget", "semop", "semctl", "msgget", "msgsnd", "msgrcv", "msgctl",
           "semtimedop", "mq_open")


def seccomp_program(self_pid, allow_fork, full, signal_scoped):
    """Build the BPF filter (a list of (code, jt, jf, k)).

    Always: no ptrace / process_vm / pidfd / tkill / System V IPC / message queues;
    ``prlimit64`` only on itself; ``kill``-family
    signals only to this process or its own group (to any positive pid when Landlock
    scopes signals); no clone into new namespaces; with ``allow_fork=False`` no new
    processes at all (threads are allowed: clone3 answers ENOSYS so libc falls back to
    clone, whose flags the filter can read). ``full`` adds sockets (every family), mount
    and namespace calls, io_uring, bpf, keyrings, perf, userfaultfd and the admin calls.
    """
    nr = _NR[ARCH]
    eperm, enosys = _ret_errno(errno.EPERM), _ret_errno(errno.ENOSYS)
    prog, fix = [], []  # fix: (index, label) for jt targets resolved at the end

    def emit(code, jt=0, jf=0, k=0):
        prog.append([code, jt, jf, k])
        return len(prog) - 1

    def jump_if(nr_value, label):  # if A == nr_value goto label
        i = emit(_JEQ, 0, 0, nr_value)
        fix.append((i, label))

    emit(_LD_W_ABS, k=4)  # arch
    emit(_JEQ, 1, 0, _AUDIT_ARCH[ARCH])
    emit(_RET, k=RET_KILL)
    emit(_LD_W_ABS, k=0)  # syscall number
    if ARCH == "x86_64":
        i = emit(_JGE, 0, 0, 0x40000000)  # x32 ABI numbers
        fix.append((i, "eperm"))
    denied = list(_ALWAYS) + (list(_NETWORK_AND_KERNEL) if full else [])
    if not allow_fork:
        denied += [n for n in ("fork", "vfork") if n in nr]
    for name in denied:
        jump_if(nr[name], "eperm")
    jump_if(nr["clone3"], "enosys")
    jump_if(nr["clone"], "clone")
    jump_if(nr["kill"], "kill")
    jump_if(nr["rt_sigqueueinfo"], "kill")
    jump_if(nr["tgkill"], "tgkill")
    jump_if(nr["prlimit64"], "tgkill")  # only on itself (pid 0 is handled below)
    emit(_RET, k=RET_ALLOW)
    labels = {}
    labels["clone"] = emit(_LD_W_ABS, k=16)  # args[0] low word: flags
    i = emit(_JSET, 0, 0, CLONE_NS)
    fix.append((i, "eperm"))
    if not allow_fork:
        i = emit(_JSET, 0, 0, CLONE_THREAD)
        fix.append((i, "allow"))
        emit(_RET, k=eperm)
    emit(_RET, k=RET_ALLOW)
    labels["kill"] = emit(_LD_W_ABS, k=16)  # pid, low word
    for v in (0, self_pid, (-self_pid) & 0xFFFFFFFF):
        i = emit(_JEQ, 0, 0, v)
        fix.append((i, "allow"))
    if signal_scoped:  # Landlock refuses signals that leave the domain; negative pids never
        i = emit(_JGE, 0, 0, 0x80000000)
        fix.append((i, "eperm"))
        emit(_RET, k=RET_ALLOW)
    emit(_RET, k=eperm)
    labels["tgkill"] = emit(_LD_W_ABS, k=16)
    for v in (0, self_pid):  # tgkill(0, ...) is invalid anyway; prlimit64(0, ...) is "myself"
        i = emit(_JEQ, 0, 0, v)
        fix.append((i, "allow"))
    emit(_RET, k=eperm)
    labels["allow"] = emit(_RET, k=RET_ALLOW)
    labels["eperm"] = emit(_RET, k=eperm)
    labels["enosys"] = emit(_RET, k=enosys)
    for i, label in fix:
        off = labels[label] - i - 1
        if not 0 <= off <= 255:
            raise ValueError("seccomp program too long for 8-bit jumps")
        prog[i][1] = off
    return [tuple(x) for x in prog]


def apply_seccomp(prog):
    if ARCH not in _NR:
        raise OSError(errno.ENOSYS, f"seccomp filter not implemented for {ARCH}")
    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog))


# ---------------------------------------------------------------------------------------
# the child: set up, run the program


def _read_paths():
    """What a program may read under Landlock: system directories and the interpreter."""
    paths = ["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/etc/ld.so.cache", sys.base_prefix, sys.prefix]
    paths += [p for p in sys.path if p and os.path.isdir(p)]
    return sorted({p for p in paths if os.path.exists(p)})


def child_main(cfg, code, token, scratch, out_w, st_w):
    """Runs in the forked child; never returns."""
    _exit, _write = os._exit, os.write
    try:
        os.setsid()
        prctl(PR_SET_PDEATHSIG, SIGKILL)
        os.chdir(scratch)
        devnull = os.open("/dev/null", os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.dup2(st_w, 3)
        os.closerange(4, 1 << 16)
        lim = cfg["limits"]
        for name, value in (("RLIMIT_CPU", lim["cpu_s"]), ("RLIMIT_AS", lim["as_bytes"]),
                            ("RLIMIT_FSIZE", lim["fsize_bytes"]), ("RLIMIT_NOFILE", lim["nofile"]),
                            ("RLIMIT_CORE", 0), ("RLIMIT_NPROC", lim.get("nproc"))):
            if value is not None:
                hard = value + 1 if name == "RLIMIT_CPU" else value
                resource.setrlimit(getattr(resource, name), (value, hard))
        if cfg.get("uid") is not None:
            os.setgroups([])
            os.setgid(cfg["gid"])
            os.setuid(cfg["uid"])
        elif os.geteuid() == 0:
            drop_capabilities()
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        scoped = False
        if cfg.get("landlock"):
            scoped = apply_landlock(_read_paths(), [scratch], ("/dev/null", "/dev/zero", "/dev/urandom")) >= 6
        apply_seccomp(seccomp_program(os.getpid(), cfg["allow_fork"], cfg.get("landlock", False), scoped))
        os.environ.clear()
        os.environ.update({"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8",
                           "TZ": "UTC"})
        sys.argv = ["<program>"]
        if sys.path and sys.path[0] != "":
            sys.path.insert(0, "")
    except BaseException as e:  # noqa: BLE001 - fail closed: never run unprotected
        try:
            _write(2, f"sandbox setup failed: {type(e).__name__}: {e}\n".encode())
        finally:
            _exit(125)
    ok = False
    try:
        compiled = compile(code, "<program>", "exec")
        exec(compiled, {"__name__": "__main__", "__builtins__": __builtins__})
        ok = True
    except SystemExit as e:
        sys.stderr.write(f"program exited early (SystemExit: {e.code!r}); that is not a pass\n")
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        pass
    if ok:
        try:
            _write(3, token)
        except OSError:
            pass
    _exit(0 if ok else 1)


# ---------------------------------------------------------------------------------------
# the zygote


def _read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def read_frame(fd):
    """One job: ``>I length`` + ``b"<timeout>\\n" + program``; None at EOF."""
    head = _read_exact(fd, 4)
    if head is None:
        return None
    body = _read_exact(fd, struct.unpack(">I", head)[0])
    if body is None:
        return None
    timeout, _, code = body.partition(b"\n")
    return {"timeout": float(timeout), "code": code.decode("utf-8", "surrogateescape")}


def write_frame(fd, head, payload=b""):
    """``>I length`` + ``b" ".join(head) + b"\\n" + payload`` (parsed by the host, never eval'd)."""
    body = " ".join(str(x) for x in head).encode() + b"\n" + payload
    data = struct.pack(">I", len(body)) + body
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _kill_leftovers(cfg, pid):
    try:
        os.killpg(pid, SIGKILL)
    except OSError:
        pass
    how = cfg["cleanup"]
    if how == "all":  # we are alone in a pid namespace / under a dedicated uid
        try:
            os.kill(-1, SIGKILL)
        except OSError:
            pass
    elif how == "uid":  # kill every process of the worker's uid from a helper that becomes it
        helper = os.fork()
        if helper == 0:
            try:
                os.setgroups([])
                os.setgid(cfg["gid"])
                os.setuid(cfg["uid"])
                os.kill(-1, SIGKILL)
            except BaseException:  # noqa: BLE001
                pass
            os._exit(0)
    # reap everything (the zygote is a subreaper: orphans come back to it); zombies count
    # against RLIMIT_NPROC, so none may stay
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue


def run_job(cfg, job):
    """Fork, run one program with the job's timeout, return the result dict."""
    token = os.urandom(16).hex().encode()
    scratch = os.path.join(cfg["scratch_root"], f"run{os.getpid()}-{time.monotonic_ns()}")
    os.mkdir(scratch, 0o700)
    if cfg.get("uid") is not None:
        os.chown(scratch, cfg["uid"], cfg["gid"])
    out_r, out_w = os.pipe()
    st_r, st_w = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(out_r)
            os.close(st_r)
            child_main(cfg, job["code"], token, scratch, out_w, st_w)
        finally:
            os._exit(124)
    os.close(out_w)
    os.close(st_w)
    limit = cfg["output_bytes"]
    deadline = t0 + float(job["timeout"])
    out, status_bytes, why = bytearray(), bytearray(), None
    pidfd = os.pidfd_open(pid)
    poll = select.poll()
    for fd in (out_r, st_r, pidfd):
        poll.register(fd, select.POLLIN)
    open_fds = {out_r, st_r}
    wstatus = None
    while wstatus is None:
        left = deadline - time.monotonic()
        if left <= 0:
            why = "timeout"
            break
        for fd, _ in poll.poll(max(1, int(left * 1000))):
            if fd == pidfd:
                wstatus = os.waitpid(pid, 0)[1]
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                poll.unregister(fd)
                open_fds.discard(fd)
            elif fd == out_r:
                out += chunk
            elif len(status_bytes) < 64:
                status_bytes += chunk
        if len(out) > limit:
            why = "output_limit"
            break
    elapsed = time.monotonic() - t0
    _kill_leftovers(cfg, pid)  # also reaps the child if it was still running
    for fd in list(open_fds):  # every writer is dead now: drain to EOF
        while len(out) <= limit:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            if fd == out_r:
                out += chunk
            else:
                status_bytes += chunk[:64]
    for fd in (out_r, st_r, pidfd):
        os.close(fd)
    _rmtree(scratch)
    if cfg.get("wipe_scratch_root"):  # bwrap: the whole tmpfs is the sandbox's only writable place
        for e in os.scandir(cfg["scratch_root"]):
            if e.is_dir(follow_symlinks=False):
                _rmtree(e.path)
            else:
                try:
                    os.unlink(e.path)
                except OSError:
                    pass
    rc = None
    if wstatus is not None:
        rc = os.waitstatus_to_exitcode(wstatus)
    if why is None:
        if rc == 0 and bytes(status_bytes) == token:
            why = "passed"
        elif rc == 125:
            why = "sandbox_error"
        elif rc is not None and rc < 0:
            why = "crashed"
        else:
            why = "failed"
    return (why, rc, "%.6f" % elapsed), bytes(out[:limit])


def _rmtree(path):
    """Remove ``path`` (files a program made read-only included) without following links."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        entries = []
    for e in entries:
        try:
            if e.is_dir(follow_symlinks=False):
                os.chmod(e.path, 0o700)
                _rmtree(e.path)
            else:
                os.unlink(e.path)
        except OSError:
            pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def serve(cfg):
    prctl(PR_SET_PDEATHSIG, SIGKILL)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    prctl(PR_SET_DUMPABLE, 0)  # children (same uid in bwrap) cannot open /proc/<zygote>/fd
    rfd, wfd = os.dup(0), os.dup(1)  # protocol channel; 0/1 become /dev/null
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    for name in cfg.get("preimport", ()):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001
            pass
    write_frame(wfd, ("ready", os.getpid(), os.getuid(), sys.version.split()[0], landlock_abi()))
    while True:
        job = read_frame(rfd)
        if job is None:
            return
        try:
            head, out = run_job(cfg, job)
        except Exception as e:  # noqa: BLE001 - report, keep serving
            head, out = ("sandbox_error", None, "0"), f"{type(e).__name__}: {e}".encode()
        write_frame(wfd, head, out)

