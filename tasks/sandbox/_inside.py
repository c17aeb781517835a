"""The part of the sandbox that runs *inside* it: the zygote server and the per-job children.

This file is standalone (standard library only) because it is executed as
``python -S -s -B -c <this source> <config dict literal>`` by an interpreter that may not see the
repository (inside bubblewrap only ``/usr``, the interpreter's prefix and a tmpfs exist).
The host (:mod:`rlsuite.tasks.sandbox`) also imports it for detection.

The zygote reads length-prefixed job headers on stdin, each followed by the job's texts, which
it reads into private anonymous mappings and zeroes and unmaps once forked (so no program or
test text stays in its heap, where a later child could find it), and answers on stdout. Every
child, before running anything:

1. starts a new session (its own process group), asks for SIGKILL if the zygote dies;
2. enters a fresh scratch directory (the judge: ``/``, nothing writable); stdin = /dev/null,
   stdout/stderr = a pipe read by the zygote, every other descriptor closed except its
   channels (below);
3. sets rlimits (CPU, address space, file size, open files, core = 0, processes);
4. drops privileges: ``setuid`` to the worker's uid (uid layer), else all capabilities;
5. sets no_new_privs, applies Landlock (landlock layer) and a seccomp filter.

*Plain* jobs (a program): one child runs it with ``exec``; it *passed* when the ``exec``
returned normally: only then does the child write a per-job random token to its status pipe
(fd 3). ``exit(0)``, ``os._exit(0)`` or a signal are failures. The token is in the program's
own process, so a program that walks the stack to it can forge a pass: plain jobs suit
programs whose pass/fail nobody is rewarded for (the hostile battery), not grading.

*Judged* jobs (grading; :class:`rlsuite.tasks.sandbox.Judged`): the zygote forks the candidate's
process with the solution alone, and only then reads the tests and makes the token, and forks
the judge. The candidate's process runs the solution and answers the judge's requests (look
up a name, call, read an attribute) on two pipes; values cross as tagged JSON of builtin
types (:func:`_encode`), other objects stay behind as opaque references. The judge never runs
candidate code (it is not dumpable, has its own Landlock domain, no writable folder and only
the interpreter's read-only folders on ``sys.path``), runs the trusted tests with the
candidate's names bound to proxies, and writes the token (or the failing exception's type)
to its status pipe. ``__eq__`` overrides, trace hooks, exits, forged tokens and writes to any
descriptor in the candidate's process cannot make a test pass.

After the job (or at the timeout), the zygote kills what its children left behind:
``kill(-1)`` inside a private pid namespace (bwrap) or as the dedicated uid (uid layer);
elsewhere the seccomp filter forbids creating processes, so the process groups are enough.
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
                   mq_open=240,
                   # file metadata (Landlock does not cover these)
                   chmod=90, fchmod=91, fchmodat=268, fchmodat2=452, chown=92, fchown=93, lchown=94, fchownat=260,
                   utime=132, utimes=235, futimesat=261, utimensat=280, setxattr=188, lsetxattr=189,
                   fsetxattr=190, removexattr=197, lremovexattr=198, fremovexattr=199, setxattrat=463,
                   removexattrat=466, file_setattr=469, truncate=76, ioctl=16),
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
                    semctl=191, msgget=186, msgsnd=189, msgrcv=188, msgctl=187, semtimedop=192, mq_open=180,
                    fchmod=52, fchmodat=53, fchmodat2=452, fchown=55, fchownat=54, utimensat=88, setxattr=5,
                    lsetxattr=6, fsetxattr=7, removexattr=14, lremovexattr=15, fremovexattr=16, setxattrat=463,
                    removexattrat=466, file_setattr=469, truncate=45, ioctl=29),
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
# calls that change a file's metadata (mode, owner, times, extended attributes, inode flags) or
# truncate it by path: Landlock's access rights do not cover them, so without these entries
# a root program under Landlock alone could chmod, chown, touch or set xattrs on host files
# it can merely see (its own scratch does not need them either)
_METADATA = ("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime", "utimes",
             "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
             "fremovexattr", "setxattrat", "removexattrat", "file_setattr", "truncate")
# ioctl commands that set inode flags, fsxattrs (chattr) or the inode generation, on any file an fd is open on:
# FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS, FS_IOC_FSSETXATTR, FS_IOC_SETVERSION, FS_IOC32_SETVERSION and ext4's
# EXT4_IOC_SETVERSION, EXT4_IOC32_SETVERSION (_IOW('v', 2, long|int), _IOW('f', 4, long|int))
_IOCTL_SETATTR = (0x40086602, 0x40046602, 0x401C5820, 0x40087602, 0x40047602, 0x40086604, 0x40046604)


def seccomp_program(self_pid, allow_fork, full, signal_scoped):
    """Build the BPF filter (a list of (code, jt, jf, k)).

    Always: no ptrace / process_vm / pidfd / tkill / System V IPC / message queues; no
    metadata changes (chmod, chown, utime, xattrs, inode-flag ioctls, truncate by path);
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
    denied = list(_ALWAYS) + [n for n in _METADATA if n in nr] + (list(_NETWORK_AND_KERNEL) if full else [])
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
    jump_if(nr["ioctl"], "ioctl")
    emit(_RET, k=RET_ALLOW)
    labels = {}
    labels["ioctl"] = emit(_LD_W_ABS, k=24)  # args[1] low word: the command
    for v in _IOCTL_SETATTR:
        i = emit(_JEQ, 0, 0, v)
        fix.append((i, "eperm"))
    emit(_RET, k=RET_ALLOW)
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
# the children: set up, then run a program, serve a candidate's calls, or judge


def _read_paths():
    """What a program may read under Landlock: system directories and the interpreter."""
    paths = ["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/etc/ld.so.cache", sys.base_prefix, sys.prefix]
    paths += [p for p in sys.path if p and os.path.isdir(p)]
    return sorted({p for p in paths if os.path.exists(p)})


def _enter_sandbox(cfg, scratch, fds):
    """In a forked child: its own session, ``fds`` placed at 0, 1, 2, ... (None = /dev/null) and
    every other descriptor closed, rlimits, privileges dropped, Landlock (read-write only
    beneath ``scratch``; None = no writable folder, cwd ``/``) and the seccomp filter. Raises on
    any failure (the caller exits 125: a sandbox error, never a run without protection)."""
    os.setsid()
    prctl(PR_SET_PDEATHSIG, SIGKILL)
    os.chdir(scratch or "/")
    devnull = os.open("/dev/null", os.O_RDWR)
    fds = [devnull if f is None else f for f in fds]
    for i, f in enumerate(fds):  # through high numbers: a source may sit on another one's target
        os.dup2(f, 200 + i)
    for i in range(len(fds)):
        os.dup2(200 + i, i)
    os.closerange(len(fds), 1 << 16)
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
        scoped = apply_landlock(_read_paths(), [scratch] if scratch else [],
                                ("/dev/null", "/dev/zero", "/dev/urandom")) >= 6
    return scoped


def _program_env(scratch):
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8", "TZ": "UTC"})
    sys.argv = ["<program>"]
    if sys.path and sys.path[0] != "":
        sys.path.insert(0, "")


def _setup_failed(e):
    try:
        os.write(2, f"sandbox setup failed: {type(e).__name__}: {e}\n".encode())
    finally:
        os._exit(125)


def _flush():
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:  # noqa: BLE001
            pass


def child_main(cfg, code_buf, n, token, scratch, out_w, st_w):
    """A plain program (runs in the forked child; never returns). Status pipe = fd 3: ``S`` once
    set up, then the token if the program ran to its end."""
    _exit, _write = os._exit, os.write
    try:
        scoped = _enter_sandbox(cfg, scratch, [None, out_w, out_w, st_w])
        apply_seccomp(seccomp_program(os.getpid(), cfg["allow_fork"], cfg.get("landlock", False), scoped))
        code = code_buf[:n].decode("utf-8", "surrogateescape")
        code_buf.close()
        _program_env(scratch)
        _write(3, b"S")
    except BaseException as e:  # noqa: BLE001 - fail closed: never run unprotected
        _setup_failed(e)
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
    _flush()
    if ok:
        try:
            _write(3, token)
        except OSError:
            pass
    _exit(0 if ok else 1)


# ---------------------------------------------------------------------------------------
# judged programs: the candidate's process answers calls, a separate judge runs the tests
#
# The candidate process runs the solution, then serves requests on fd 3 (answers on fd 4):
# look up a name, call an object, read an attribute. Values cross as JSON of builtin types
# with tags (below); any other object stays in the candidate's process and crosses as an
# opaque reference. The judge (forked from the zygote, never running candidate code, not
# dumpable, in its own Landlock domain, holding the job's token) executes the trusted test
# code with the candidate's names bound to proxies, so every comparison, tolerance and
# ``check`` runs on builtin values in the judge's own interpreter.

_BIG = 1 << 12000  # ints beyond this cross as hex (decimal str() is limited to 4300 digits)
_INF = float("inf")
MAX_MESSAGE = 32 << 20
MAX_ITEMS = 1 << 20
_FACTORIES = ("int", "float", "str", "list", "tuple", "set", "dict", "bool", "frozenset", "bytes")
_MODULES = frozenset(("math", "cmath", "re", "string", "collections", "itertools", "functools", "heapq", "bisect",
                      "operator", "random", "statistics", "fractions", "decimal", "typing", "copy", "datetime",
                      "json", "hashlib", "array", "textwrap", "unicodedata", "numbers", "enum", "dataclasses",
                      "time", "calendar", "struct", "binascii", "base64", "difflib", "pprint", "io"))
"""Modules a result may name (e.g. an MBPP test's ``math``, imported by the solution)."""
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")


class ProtocolError(BaseException):
    """The candidate's side broke the call protocol (a BaseException: tests cannot swallow it)."""


class CandidateGone(BaseException):
    """The candidate's process ended (or exited) before answering."""


class CandidateError(Exception):
    """The candidate raised an exception that is not a builtin one (its type name is kept)."""


def _name(x, default="?"):
    x = str(x)[:80]
    return x if x and all(c in _NAME_CHARS for c in x) and not x[0].isdigit() else default


def _short(x, n=300):
    try:
        return str(x)[:n]
    except BaseException:  # noqa: BLE001
        return "?"


def _send(fd, obj):
    import json

    data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    data = memoryview(struct.pack(">I", len(data)) + data)
    while data:
        data = data[os.write(fd, data):]


def _recv(fd):
    head = _read_exact(fd, 4)
    if head is None:
        raise CandidateGone("the candidate's process ended")
    n = struct.unpack(">I", head)[0]
    if n > MAX_MESSAGE:
        raise ProtocolError(f"a message of {n} bytes")
    body = _read_exact(fd, n)
    if body is None:
        raise CandidateGone("the candidate's process ended mid-message")
    import json

    try:
        return json.loads(body)
    except Exception as e:  # noqa: BLE001
        raise ProtocolError(f"not JSON ({type(e).__name__})") from None


_iter_types = None


def _iterator_types():
    global _iter_types
    if _iter_types is None:
        def gen():
            yield

        _iter_types = {type(gen()), map, filter, zip, enumerate, reversed}
        _iter_types.update(type(iter(x)) for x in ([], (), "", b"", range(0), set(), {}, {}.values(), {}.items(),
                                                 bytearray()))
        _iter_types.add(type(reversed([])))
    return _iter_types


def _encode(v, refs):
    """``v`` as JSON-ready data: None, bool, int, float and str as themselves, lists as lists,
    everything else as ``{"$": tag, "v": ...}``, so that tuple/list/set/dict/bool/int stay
    distinct. ``refs``: the candidate's side keeps any other object there and sends a
    reference; the judge's side (None) refuses other objects, except references it was sent."""
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -_BIG < v < _BIG else {"$": "int", "v": hex(v)}
    if t is float:
        return v if -_INF < v < _INF else {"$": "float", "v": repr(v)}
    if t is list:
        return [_encode(x, refs) for x in v]
    if t is tuple:
        return {"$": "tuple", "v": [_encode(x, refs) for x in v]}
    if t is dict:
        return {"$": "dict", "v": [[_encode(k, refs), _encode(x, refs)] for k, x in v.items()]}
    if t is set or t is frozenset:
        return {"$": t.__name__, "v": [_encode(x, refs) for x in v]}
    if t is bytes or t is bytearray:
        return {"$": t.__name__, "v": v.hex()}
    if t is complex:
        return {"$": "complex", "v": [_encode(v.real, refs), _encode(v.imag, refs)]}
    if t is range:
        return {"$": "range", "v": [_encode(v.start, refs), _encode(v.stop, refs), _encode(v.step, refs)]}
    if t is _Remote:
        return {"$": "ref", "id": object.__getattribute__(v, "_id")}
    C = sys.modules.get("collections")
    if C is not None:
        if t is C.Counter or t is C.OrderedDict:
            return {"$": t.__name__, "v": [[_encode(k, refs), _encode(x, refs)] for k, x in dict.items(v)]}
        if t is C.defaultdict:
            f = v.default_factory
            return {"$": "defaultdict", "f": f.__name__ if f in (int, float, str, list, tuple, set, dict, bool,
                                                                 frozenset, bytes) else None,
                    "v": [[_encode(k, refs), _encode(x, refs)] for k, x in dict.items(v)]}
        if t is C.deque:
            return {"$": "deque", "v": [_encode(x, refs) for x in v], "m": v.maxlen}
    if isinstance(v, tuple) and type(getattr(t, "_fields", None)) is tuple:  # a namedtuple compares as a tuple
        return {"$": "tuple", "v": [_encode(x, refs) for x in tuple.__iter__(v)]}
    D = sys.modules.get("decimal")
    if D is not None and t is D.Decimal:
        return {"$": "Decimal", "v": str(v)}
    F = sys.modules.get("fractions")
    if F is not None and t is F.Fraction:
        return {"$": "Fraction", "v": [_encode(v.numerator, refs), _encode(v.denominator, refs)]}
    if t is type(sys):
        return {"$": "module", "v": str(v.__name__)}
    if t is type({}.keys()):
        return {"$": "keys", "v": [_encode(x, refs) for x in v]}
    if t is type({}.values()):
        return {"$": "values", "v": [_encode(x, refs) for x in v]}
    if t is type({}.items()):
        return {"$": "items", "v": [[_encode(k, refs), _encode(x, refs)] for k, x in v]}
    if t in _iterator_types():  # consumed here: the other side gets an iterator over the items
        items = []
        for x in v:
            if len(items) >= MAX_ITEMS:
                raise ValueError(f"the returned iterator yields more than {MAX_ITEMS} items")
            items.append(_encode(x, refs))
        return {"$": "iter", "v": items}
    if refs is None:
        raise TypeError(f"a {t.__name__} cannot be passed to the candidate (only builtin values cross)")
    refs.append(v)
    return {"$": "ref", "id": len(refs) - 1, "t": _name(getattr(t, "__name__", "?"))}


def _decode(v, refs):
    """The inverse of :func:`_encode`. On the judge's side (``refs`` None) ``v`` is untrusted:
    only builtin (and a few standard-library) values are built, never an object of a type the
    candidate defined; a reference becomes an opaque :class:`_Remote`."""
    t = type(v)
    if v is None or t is bool or t is int or t is float or t is str:
        return v
    if t is list:
        return [_decode(x, refs) for x in v]
    if t is not dict:
        raise ProtocolError(f"unexpected {t.__name__}")
    tag, x = v.get("$"), v.get("v")

    def items():
        if type(x) is not list:
            raise ProtocolError(f"{tag}: not a list")
        return [_decode(y, refs) for y in x]

    def pairs():
        out = items()
        if not all(type(p) is list and len(p) == 2 for p in out):
            raise ProtocolError(f"{tag}: not a list of pairs")
        return out

    def num(y):
        if type(y) not in (int, float):
            raise ProtocolError(f"{tag}: not a number")
        return y

    if tag == "tuple":
        return tuple(items())
    if tag == "dict":
        return dict(pairs())
    if tag == "set":
        return set(items())
    if tag == "frozenset":
        return frozenset(items())
    if tag == "int" and type(x) is str and len(x) < MAX_MESSAGE:
        return int(x, 16)
    if tag == "float" and x in ("nan", "inf", "-inf"):
        return float(x)
    if tag in ("bytes", "bytearray") and type(x) is str:
        return (bytes if tag == "bytes" else bytearray).fromhex(x)
    if tag == "complex":
        a, b = items()
        return complex(num(a), num(b))
    if tag == "range":
        a, b, c = items()
        if not all(type(y) is int for y in (a, b, c)):
            raise ProtocolError("range: not ints")
        return range(a, b, c)
    if tag in ("Counter", "OrderedDict", "defaultdict", "deque"):
        import collections

        if tag == "deque":
            m = v.get("m")
            if m is not None and (type(m) is not int or m < 0):
                raise ProtocolError("deque: bad maxlen")
            return collections.deque(items(), m)
        d = dict(pairs())
        if tag == "defaultdict":
            f = v.get("f")
            if f is not None and f not in _FACTORIES:
                raise ProtocolError("defaultdict: unknown factory")
            return collections.defaultdict(None if f is None else getattr(__import__("builtins"), f), d)
        return getattr(collections, tag)(d)
    if tag == "Decimal" and type(x) is str and len(x) <= 10000:
        import decimal

        return decimal.Decimal(x)
    if tag == "Fraction":
        import fractions

        a, b = items()
        if type(a) is not int or type(b) is not int:
            raise ProtocolError("Fraction: not ints")
        return fractions.Fraction(a, b)
    if tag == "iter":
        return iter(items())
    if tag == "keys":
        return dict.fromkeys(items()).keys()
    if tag == "values":
        return dict(enumerate(items())).values()
    if tag == "items":
        return dict(pairs()).items()
    if tag == "module" and type(x) is str:
        if refs is not None:
            return sys.modules.get(x)
        if x not in sys.modules and x not in _MODULES:  # never an import the candidate chose freely
            raise ProtocolError(f"module {_short(x, 40)!r} is not one the judge imports")
        __import__(x)  # (the judge's sys.path holds only the interpreter's read-only folders)
        return sys.modules[x]
    if tag == "ref" and type(v.get("id")) is int:
        if refs is None:
            return _Remote(v["id"], _name(v.get("t")))
        return refs[v["id"]]
    raise ProtocolError(f"unknown value tag {_short(tag, 40)!r}")


class _Remote:
    """The judge's handle on an object that stayed in the candidate's process (a function, an
    instance of a class it defined...): it can be called, passed back and have attributes read
    (each a request to the candidate); its truth value is refused, and it equals only itself."""

    __slots__ = ("_id", "_t")

    def __init__(self, i, t):
        object.__setattr__(self, "_id", i)
        object.__setattr__(self, "_t", t)

    def __call__(self, *args, **kwargs):
        return _JUDGE.request({"op": "call", "id": self._id, "a": [_encode(a, None) for a in args],
                               "k": [[str(k), _encode(a, None)] for k, a in kwargs.items()]})

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _JUDGE.request({"op": "attr", "id": self._id, "n": name})

    def __bool__(self):
        raise TypeError(f"the candidate returned a {self._t} object, not a builtin value; its truth value is "
                        "not trusted")

    def __repr__(self):
        return f"<the candidate's {self._t}>"


_PASSTHROUGH_EXCLUDED = ("StopIteration", "StopAsyncIteration")


def _remote_error(name, msg):
    """The judge's exception for one the candidate raised: the builtin exception of that name
    (so tests that expect e.g. ValueError still work), else :class:`CandidateError`."""
    import builtins

    name, msg = _name(name, "Exception"), _short(msg)
    if name in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
        return CandidateGone(f"the program exited early ({name}: {msg}); that is not a pass")
    cls = getattr(builtins, name, None)
    e = None
    if isinstance(cls, type) and issubclass(cls, Exception) and name not in _PASSTHROUGH_EXCLUDED:
        try:
            e = cls(msg)
        except Exception:  # noqa: BLE001 - e.g. UnicodeDecodeError needs five arguments
            e = None
    if e is None:
        e = CandidateError(f"{name}: {msg}")
    e._rlsuite_remote = name
    return e


class _Judge:
    def __init__(self, to_fd, from_fd):
        self.to_fd, self.from_fd = to_fd, from_fd
        self.broken = None

    def request(self, msg, lookup=False):
        if self.broken is not None:  # once the channel broke, nothing more is believed
            raise self.broken
        try:
            _send(self.to_fd, msg)
            r = _recv(self.from_fd)
            if lookup and type(r) is dict and r.get("u") == 1 and len(r) == 1:
                return _UNDEFINED  # only a name lookup may answer "not defined"
            return self.result(r)
        except (ProtocolError, CandidateGone) as e:
            self.broken = type(e)(*e.args)
            raise
        except BrokenPipeError:
            self.broken = CandidateGone("the candidate's process ended")
            raise self.broken from None

    def result(self, r):
        if type(r) is not dict:
            raise ProtocolError("an answer that is not an object")
        if "v" in r:
            try:
                return _decode(r["v"], None)
            except (ProtocolError, CandidateGone):
                raise
            except Exception as e:  # noqa: BLE001 - unhashable set items, bad hex, recursion depth...
                raise ProtocolError(f"an invalid value ({type(e).__name__}: {_short(e, 100)})") from None
        if "err" in r:
            raise _remote_error(r.get("err"), r.get("msg"))
        raise ProtocolError("an answer with neither a value nor an error")


_JUDGE = None


def _clear_hooks():
    sys.settrace(None)
    sys.setprofile(None)
    th = sys.modules.get("threading")
    if th is not None:
        th.settrace(None)
        th.setprofile(None)


def judge(spec, token, to_fd, from_fd):
    """Run the trusted test code of ``spec`` (``context``, ``remote`` names, ``tests``) against
    the candidate behind the descriptors. Returns the verdict for the zygote: ``P<token>``
    (every test ran to its end), ``F<Exception type>\\t<message>`` or ``E<message>``."""
    global _JUDGE
    import builtins

    _JUDGE = j = _Judge(to_fd, from_fd)
    try:
        ready = _recv(from_fd)
        if type(ready) is not dict or ready.get("ok") != 1:
            if type(ready) is dict and "exit" in ready:
                raise CandidateGone(f"the program exited early ({_short(ready['exit'], 100)}); that is not a pass")
            j.result(ready)  # raises the program's own exception
            raise ProtocolError("a malformed start message")
        ns = {"__name__": "__main__", "__builtins__": builtins}
        if spec.get("context"):
            exec(compile(spec["context"], "<context>", "exec"), ns)
        for name in spec.get("remote", ()):
            r = j.request({"op": "get", "n": name}, lookup=True)
            if r is _UNDEFINED:
                ns.pop(name, None)  # a builtin of that name applies, else a NameError
            else:
                ns[name] = r
        _clear_hooks()
        exec(compile(spec["tests"], "<tests>", "exec"), ns)
        return b"P" + token
    except (CandidateGone, ProtocolError) as e:
        what = "the candidate broke the call protocol: " if isinstance(e, ProtocolError) else ""
        return b"E" + (what + _short(e)).encode("utf-8", "replace")
    except BaseException as e:  # noqa: BLE001
        name = getattr(e, "_rlsuite_remote", None) or type(e).__name__
        msg = str(e.args[0]) if isinstance(e, CandidateError) and e.args else _short(e)
        return b"F" + f"{name}\t{msg[:300]}".encode("utf-8", "replace")


class _Undefined:
    pass


_UNDEFINED = _Undefined()


def _serve_calls(ns, from_fd, to_fd):
    """The candidate's side: answer the judge's requests until it hangs up."""
    refs = []
    while True:
        try:
            req = _recv(from_fd)
        except BaseException:  # noqa: BLE001 - the judge is done
            return
        try:
            op = req["op"]
            if op == "get":
                resp = {"v": _encode(ns[req["n"]], refs)} if req["n"] in ns else {"u": 1}
            elif op == "call":
                f = refs[req["id"]]
                args = [_decode(a, refs) for a in req["a"]]
                kwargs = {k: _decode(a, refs) for k, a in req["k"]}
                resp = {"v": _encode(f(*args, **kwargs), refs)}
            elif op == "attr":
                resp = {"v": _encode(getattr(refs[req["id"]], req["n"]), refs)}
            else:
                resp = {"err": "ProtocolError", "msg": f"unknown op {op!r}"}
        except SystemExit as e:
            resp = {"err": "SystemExit", "msg": _short(repr(e.code))}
        except BaseException as e:  # noqa: BLE001
            resp = {"err": _name(type(e).__name__, "Exception"), "msg": _short(e)}
        _flush()
        try:
            _send(to_fd, resp)
        except (ValueError, TypeError, RecursionError) as e:  # e.g. too deep to serialise
            _send(to_fd, {"err": type(e).__name__, "msg": _short(e)})


def candidate_main(cfg, code_buf, n, scratch, out_w, req_r, resp_w, mark_w):
    """The candidate's process of a judged job (forked child; never returns): run the solution,
    then serve calls (fd 3 in, fd 4 out). fd 5 gets ``S`` once the sandbox is set up and is
    closed before the program runs, so an exit code of 125 from the program itself is a failure,
    not a sandbox error."""
    try:
        scoped = _enter_sandbox(cfg, scratch, [None, out_w, out_w, req_r, resp_w, mark_w])
        apply_seccomp(seccomp_program(os.getpid(), cfg["allow_fork"], cfg.get("landlock", False), scoped))
        code = code_buf[:n].decode("utf-8", "surrogateescape")
        code_buf.close()
        import json  # noqa: F401  (the codec's, before the program can plant a json.py in its folder)

        _program_env(scratch)
        os.write(5, b"S")
        os.close(5)
    except BaseException as e:  # noqa: BLE001 - fail closed
        _setup_failed(e)
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    ready = {"ok": 1}
    try:
        exec(compile(code, "<program>", "exec"), ns)
    except SystemExit as e:
        sys.stderr.write(f"program exited early (SystemExit: {e.code!r}); that is not a pass\n")
        ready = {"exit": _short(f"SystemExit: {e.code!r}")}
    except BaseException as e:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        ready = {"err": _name(type(e).__name__, "Exception"), "msg": _short(e)}
    _flush()
    try:
        _send(4, ready)
        if "ok" in ready:
            _serve_calls(ns, 3, 4)
    except BaseException:  # noqa: BLE001
        pass
    _flush()
    os._exit(0)


def judge_main(cfg, spec_buf, n, token, st_w, req_w, resp_r):
    """The judge of a judged job (forked child; never returns): no program runs here. Writes
    its verdict to fd 3."""
    try:
        scoped = _enter_sandbox(cfg, None, [None, None, None, st_w, req_w, resp_r])
        prctl(PR_SET_DUMPABLE, 0)  # after the uid switch: no /proc/<judge>/mem for the candidate
        apply_seccomp(seccomp_program(os.getpid(), False, cfg.get("landlock", False), scoped))
        import json

        spec = json.loads(spec_buf[:n])
        spec_buf.close()
        sys.path[:] = [p for p in sys.path if p and os.path.isabs(p)]  # never the cwd or a scratch folder
        sys.argv = ["<tests>"]
    except BaseException as e:  # noqa: BLE001
        _setup_failed(e)
    verdict = judge(spec, token, 4, 5)
    try:
        os.write(3, verdict)
    except OSError:
        pass
    os._exit(0 if verdict[:1] == b"P" else 1)


# ---------------------------------------------------------------------------------------
# the zygote


def _read_exact(fd, n):
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def read_frame(fd):
    """One job's header: ``>I length`` + ``b"<kind> <timeout> <n1> [<n2>]"``; None at EOF. The
    job's texts follow raw; :func:`read_segment` reads each into private anonymous memory,
    so that no program or test text is ever held in the zygote's heap (a later program, forked
    from the zygote, could otherwise find earlier jobs' texts in freed memory)."""
    head = _read_exact(fd, 4)
    if head is None:
        return None
    line = _read_exact(fd, struct.unpack(">I", head)[0])
    if line is None:
        return None
    parts = line.decode().split()
    return {"kind": parts[0], "timeout": float(parts[1]), "lens": [int(x) for x in parts[2:]], "read": 0}


def read_segment(fd, job):
    """The job's next text, in a private anonymous mapping (``(buffer, length)``)."""
    import mmap

    n = job["lens"][job["read"]]
    job["read"] += 1
    buf = mmap.mmap(-1, max(n, 1), flags=mmap.MAP_PRIVATE)
    view = memoryview(buf)
    try:
        got = 0
        while got < n:
            k = os.readv(fd, [view[got:n]])
            if k == 0:
                raise EOFError("the host closed the job channel mid-job")
            got += k
    finally:
        view.release()
    return buf, n


def wipe(buf):
    """Zero and unmap a segment (the forked children keep their own copies)."""
    try:
        buf.seek(0)
        buf.write(bytes(len(buf)))
    finally:
        buf.close()


def skip_segments(fd, job):
    while job["read"] < len(job["lens"]):
        wipe(read_segment(fd, job)[0])


def write_frame(fd, head, payload=b""):
    """``>I length`` + ``b" ".join(head) + b"\\n" + payload`` (parsed by the host, never eval'd)."""
    body = " ".join(str(x) for x in head).encode() + b"\n" + payload
    data = struct.pack(">I", len(body)) + body
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _kill_leftovers(cfg, pids):
    for pid in pids:
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


def _new_scratch(cfg):
    scratch = os.path.join(cfg["scratch_root"], f"run{os.getpid()}-{time.monotonic_ns()}")
    os.mkdir(scratch, 0o700)
    if cfg.get("uid") is not None:
        os.chown(scratch, cfg["uid"], cfg["gid"])
    return scratch


def _collect(cfg, main_pid, pids, streams, out_fd, deadline):
    """Read ``streams`` (fd → [buffer, cap]) until ``main_pid`` exits, the deadline passes or the
    output (``out_fd``) exceeds the limit; then kill what is left and drain the pipes. Returns
    (why or None, {pid: wait status} of the children seen to exit on their own)."""
    limit = cfg["output_bytes"]
    pidfds = {os.pidfd_open(p): p for p in pids}
    poll = select.poll()
    for fd in list(streams) + list(pidfds):
        poll.register(fd, select.POLLIN)
    open_fds = set(streams)
    status, why = {}, None
    try:
        while main_pid not in status:
            left = deadline - time.monotonic()
            if left <= 0:
                why = "timeout"
                break
            for fd, _ in poll.poll(max(1, int(left * 1000))):
                if fd in pidfds:
                    status[pidfds[fd]] = os.waitpid(pidfds[fd], 0)[1]
                    poll.unregister(fd)
                    continue
                chunk = os.read(fd, 65536)
                buf, cap = streams[fd]
                if not chunk:
                    poll.unregister(fd)
                    open_fds.discard(fd)
                elif len(buf) < cap:
                    buf += chunk
            if len(streams[out_fd][0]) > limit:
                why = "output_limit"
                break
        for p in pids:  # a child that ended together with the main one
            if p not in status:
                try:
                    q, st = os.waitpid(p, os.WNOHANG)
                except ChildProcessError:
                    continue
                if q:
                    status[p] = st
        _kill_leftovers(cfg, pids)  # also reaps the children still running
        for fd in open_fds:  # every writer is dead now: drain to EOF
            buf, cap = streams[fd]
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                if len(buf) < cap:
                    buf += chunk
    finally:
        for fd in list(streams) + list(pidfds):
            os.close(fd)
    return why, status


def _rc(status, pid):
    return os.waitstatus_to_exitcode(status[pid]) if pid in status else None


def _finish_scratch(cfg, scratch):
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


def run_plain(cfg, job, rfd):
    """Fork, run one program with the job's timeout, return the result."""
    token = os.urandom(16).hex().encode()
    scratch = _new_scratch(cfg)
    out_r, out_w = os.pipe()
    st_r, st_w = os.pipe()
    buf, n = read_segment(rfd, job)
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(out_r)
            os.close(st_r)
            child_main(cfg, buf, n, token, scratch, out_w, st_w)
        finally:
            os._exit(124)
    wipe(buf)
    os.close(out_w)
    os.close(st_w)
    out, st = bytearray(), bytearray()
    limit = cfg["output_bytes"]
    why, status = _collect(cfg, pid, [pid], {out_r: [out, limit + 1], st_r: [st, 64]}, out_r,
                           t0 + float(job["timeout"]))
    elapsed = time.monotonic() - t0
    _finish_scratch(cfg, scratch)
    rc = _rc(status, pid)
    if why is None:
        if rc == 0 and bytes(st) == b"S" + token:
            why = "passed"
        elif rc == 125 and not st.startswith(b"S"):  # only before the program ran
            why = "sandbox_error"
        elif rc is not None and rc < 0:
            why = "crashed"
        else:
            why = "failed"
    return (why, rc, "%.6f" % elapsed), bytes(out[:limit])


def run_judged(cfg, job, rfd):
    """Fork the candidate's process (with the solution only), then the judge (with the tests
    and a fresh token, which the candidate's process never had); the job passes when the
    judge reports that every test ran to its end."""
    scratch = _new_scratch(cfg)
    out_r, out_w = os.pipe()
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    mark_r, mark_w = os.pipe()
    buf, n = read_segment(rfd, job)
    t0 = time.monotonic()
    cand = os.fork()
    if cand == 0:
        try:
            for fd in (out_r, req_w, resp_r, mark_r):
                os.close(fd)
            candidate_main(cfg, buf, n, scratch, out_w, req_r, resp_w, mark_w)
        finally:
            os._exit(124)
    wipe(buf)
    for fd in (out_w, req_r, resp_w, mark_w):
        os.close(fd)
    spec, m = read_segment(rfd, job)  # only now: the candidate's process never had the tests
    token = os.urandom(16).hex().encode()
    st_r, st_w = os.pipe()
    judge_pid = os.fork()
    if judge_pid == 0:
        try:
            for fd in (out_r, mark_r, st_r):
                os.close(fd)
            judge_main(cfg, spec, m, token, st_w, req_w, resp_r)
        finally:
            os._exit(124)
    wipe(spec)
    for fd in (st_w, req_w, resp_r):
        os.close(fd)
    out, verdict, mark = bytearray(), bytearray(), bytearray()
    limit = cfg["output_bytes"]
    why, status = _collect(cfg, judge_pid, [judge_pid, cand],
                           {out_r: [out, limit + 1], st_r: [verdict, 4096], mark_r: [mark, 8]}, out_r,
                           t0 + float(job["timeout"]))
    elapsed = time.monotonic() - t0
    _finish_scratch(cfg, scratch)
    rc, crc = _rc(status, judge_pid), _rc(status, cand)
    line = ""
    if why is None:
        v = bytes(verdict)
        if rc == 0 and v == b"P" + token:
            why = "passed"
        elif rc == 125 or (crc == 125 and not mark.startswith(b"S")):
            why = "sandbox_error"
        elif v[:1] == b"F":
            why = "failed"
            name, _, msg = v[1:].decode("utf-8", "replace").partition("\t")
            line = f"{name}: {msg}" if msg else name
        elif v[:1] == b"E":
            why = "crashed" if crc is not None and crc < 0 else "failed"
            line = v[1:].decode("utf-8", "replace")
        else:
            why = "crashed" if rc is not None and rc < 0 else "failed"
    out = bytes(out[:limit])
    if line:  # the judge's verdict closes the output (its exception type is the error class)
        tail = ("\n" if out and not out.endswith(b"\n") else "") + line + "\n"
        tail_b = tail.encode("utf-8", "replace")[:limit]
        out = out[:limit - len(tail_b)] + tail_b
    return (why, rc, "%.6f" % elapsed), out


def run_job(cfg, job, rfd):
    try:
        if job["kind"] == "judged":
            return run_judged(cfg, job, rfd)
        return run_plain(cfg, job, rfd)
    finally:
        skip_segments(rfd, job)  # keep the channel in step whatever happened


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
            head, out = run_job(cfg, job, rfd)
        except EOFError:
            return
        except Exception as e:  # noqa: BLE001 - report, keep serving
            head, out = ("sandbox_error", None, "0"), f"{type(e).__name__}: {e}".encode()
        write_frame(wfd, head, out)
