"""The harness inside a sandbox process: put up the walls, then run the requests, one answer frame each.

The parent (gymflow/sandbox/__init__.py) starts it as `python -I -S -B -u -X utf8 -c <this file> IN OUT`, so it
uses the standard library only and never imports gymflow. The order is the point: read the whole request and
close its pipe; enter new network and mount namespaces; chroot into a root holding only the interpreter and a
private /tmp; set rlimits; drop to a uid of its own; install the audit hook; only then compile candidate code.
A step the kernel refuses is skipped and left out of `layers`, which the first frame reports.

The parent also imports `encode` from here, so a returned value and an expected one are encoded alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import sys
from typing import Any

MAX_FRAME = 1 << 20  # bytes of one answer; a bigger result is an error, never cut (a cut could match)
MAX_REPR = 100_000  # characters of the canonical repr of a non-JSON result
MAX_DEPTH = 100  # nesting followed by `encode`; deeper values are an error
ERROR_CHARS = 300  # an error is one line of at most this many characters

# <linux/sched.h>, <linux/mount.h>, <linux/prctl.h>
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, CLONE_THREAD = 0x00020000, 0x10000000, 0x40000000, 0x00010000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 1, 4, 38, 22, 2

# <linux/landlock.h>: the syscalls share their numbers on every architecture.
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_RULE_PATH_BENEATH, LANDLOCK_CREATE_RULESET_VERSION = 1, 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1, 2, 4, 8
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_DIR, FS_MAKE_REG = 16, 32, 128, 256
FS_TRUNCATE = 1 << 14  # ABI 3
FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}  # every right of an ABI
NET_TCP = 1 | 2  # bind, connect (ABI 4): handled with no rule, so refused
SCOPE_UNIX_AND_SIGNAL = 1 | 2  # abstract unix sockets, signals to processes outside the domain (ABI 6)

# <linux/seccomp.h>, <linux/filter.h>, <linux/audit.h>
SECCOMP_ALLOW, SECCOMP_KILL = 0x7FFF0000, 0x80000000
BPF_LD_ABS, BPF_JEQ, BPF_JGE, BPF_JSET, BPF_RET = 0x20, 0x15, 0x35, 0x45, 0x06
# Per architecture: its audit id, then the syscalls refused outright (EPERM) and those allowed only on this
# process (argument 0 must be its pid, or 0 for kill), the refusals the kernel layers rest on without namespaces:
# sockets, new programs and processes, tracing, signals and pidfds aimed at others, io_uring (it runs syscalls
# the filter never sees), changes to file metadata (Landlock guards contents, not modes, owners or times), device
# nodes, and the namespace, mount, module, clock and key calls a root process could climb out with.
SYSCALLS = {
    "x86_64": (0xC000003E, {
        "socket": 41, "socketpair": 53, "execve": 59, "execveat": 322, "fork": 57, "vfork": 58,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_open": 434,
        "pidfd_send_signal": 424, "pidfd_getfd": 438, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "bpf": 321, "userfaultfd": 323, "perf_event_open": 298, "unshare": 272,
        "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "keyctl": 250,
        "add_key": 248, "request_key": 249, "open_by_handle_at": 304, "name_to_handle_at": 303,
        "kcmp": 312, "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsmount": 432,
        "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "chown": 92, "fchown": 93,
        "lchown": 94, "fchownat": 260, "utime": 132, "utimes": 235, "futimesat": 261, "utimensat": 280,
        "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198,
        "fremovexattr": 199, "setxattrat": 463, "removexattrat": 466, "mknod": 133, "mknodat": 259,
        "reboot": 169, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305,
        "adjtimex": 159, "sethostname": 170, "setdomainname": 171, "swapon": 167, "swapoff": 168,
        "iopl": 172, "ioperm": 173, "syslog": 103, "acct": 163, "quotactl": 179,
    }, {"kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297},
        {"clone": 56, "clone3": 435}),
    "aarch64": (0xC00000B7, {
        "socket": 198, "socketpair": 199, "execve": 221, "execveat": 281, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_open": 434, "pidfd_send_signal": 424,
        "pidfd_getfd": 438, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "bpf": 280, "userfaultfd": 282, "perf_event_open": 241, "unshare": 97, "setns": 268, "mount": 40,
        "umount2": 39, "pivot_root": 41, "chroot": 51, "keyctl": 219, "add_key": 217, "request_key": 218,
        "open_by_handle_at": 265, "name_to_handle_at": 264, "kcmp": 272, "move_mount": 429,
        "open_tree": 428, "fsopen": 430, "fsmount": 432,
        "fchmod": 52, "fchmodat": 53, "fchmodat2": 452, "fchown": 55, "fchownat": 54, "utimensat": 88,
        "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
        "fremovexattr": 16, "setxattrat": 463, "removexattrat": 466, "mknodat": 33,
        "reboot": 142, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266,
        "adjtimex": 171, "sethostname": 161, "setdomainname": 162, "swapon": 224, "swapoff": 225,
        "syslog": 116, "acct": 89, "quotactl": 60,
    }, {"kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240},
        {"clone": 220, "clone3": 435}),
}  # fmt: skip
# What each kind of escape needs at least one of, among the kernel layers (the audit hook never counts: the
# candidate can reach and rewrite its state).
CONTAINMENT = {
    "network": ("netns", "seccomp"),
    "files": ("chroot", "landlock"),
    "processes and signals": ("uid", "seccomp"),
}

# Audit events refused outright (a prefix ending in "." refuses the family): processes, sockets, native code,
# rlimits, links (a link could point the hook's path check at one file and the kernel at another).
REFUSED_EVENTS = (
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen",
    "pty.spawn", "os.startfile", "webbrowser.open", "os.killpg", "os.symlink", "os.link",
    "resource.setrlimit", "resource.prlimit",
    "socket.", "ctypes.", "syslog.", "urllib.Request", "os.add_dll_directory", "winreg.", "msvcrt.",
)  # fmt: skip
# Modules that reach around the events above: fork_exec without "subprocess.Popen", foreign calls, files
# opened in C (SQLite's ATTACH, readline's history, POSIX semaphores and shared memory), interpreter internals.
REFUSED_IMPORTS = frozenset(
    ["_posixsubprocess", "ctypes", "_ctypes", "_sqlite3", "readline", "_multiprocessing", "_posixshmem"]
    + ["_xxsubinterpreters", "_testcapi", "_testinternalcapi", "_testbuffer", "_testmultiphase"]
    + ["_testimportmultiple", "_xxtestfuzz", "_gdbm", "_dbm"]
)
# Events whose path arguments must lie in the private directory: (how many leading arguments are paths, the
# positions of dir_fd arguments). A dir_fd other than -1 is refused: the hook cannot see where it points.
MUTATING_EVENTS = {
    "os.remove": (1, (1,)), "os.rmdir": (1, (1,)), "os.mkdir": (1, (2,)), "os.rename": (2, (2, 3)),
    "os.chmod": (1, (2,)), "os.chown": (1, (3,)), "os.utime": (1, (3,)), "os.truncate": (1, ()),
    "os.setxattr": (1, ()), "os.removexattr": (1, ()), "shutil.rmtree": (1, (1,)),
}  # fmt: skip
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class CaseTimeout(BaseException):
    """Raised into a call that outlives its case budget; a BaseException so `except Exception` lets it pass."""


# ---------------------------------------------------------------------------------------------- encoding


def _plain(value: Any, depth: int = 0) -> bool:
    """True for JSON data of exact builtin types (a subclass could change equality): None, bool, int, float,
    str, and lists and str-keyed dicts of them."""
    kind = type(value)
    if kind in (type(None), bool, int, float, str):
        return True
    if depth > MAX_DEPTH:
        raise RecursionError("result nested too deeply")
    if kind is list:
        return all(_plain(item, depth + 1) for item in value)
    if kind is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    return False


def _canon(value: Any, depth: int = 0) -> str:
    """repr, made independent of set order and dict insertion order (== ignores both)."""
    if depth > MAX_DEPTH:
        raise RecursionError("result nested too deeply")
    kind = type(value)
    if kind in (tuple, list):
        items = [_canon(item, depth + 1) for item in value]
        if kind is list:
            return "[" + ", ".join(items) + "]"
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if kind is dict:
        return (
            "{"
            + ", ".join(sorted(f"{_canon(k, depth + 1)}: {_canon(v, depth + 1)}" for k, v in value.items()))
            + "}"
        )
    if kind in (set, frozenset):
        inner = "{" + ", ".join(sorted(_canon(item, depth + 1) for item in value)) + "}"
        if kind is frozenset:
            return f"frozenset({inner})" if value else "frozenset()"
        return inner if value else "set()"
    return repr(value)


def encode(value: Any) -> dict[str, Any]:
    """How a value crosses back: {"value": v} for plain JSON data, else {"repr": canonical repr, "type": name}.

    The parent encodes its expected value the same way and compares the dicts, so equality is Python's `==` on
    plain data and equality of canonical reprs otherwise (a tuple never equals a list, as in Python).
    Raises ValueError for a result over MAX_FRAME bytes or MAX_REPR characters, RecursionError past MAX_DEPTH.
    """
    if _plain(value):
        out: dict[str, Any] = {"value": value}
        if len(json.dumps(out)) > MAX_FRAME - 64:
            raise ValueError("result too large")
        return out
    text = _canon(value)
    if len(text) > MAX_REPR:
        raise ValueError("result too large")
    kind = type(value)
    return {"repr": text, "type": f"{kind.__module__}.{kind.__qualname__}"}


def error_line(exc: BaseException) -> str:
    """One line naming the exception: "timeout", "memory limit", or "Name: message"."""
    if isinstance(exc, CaseTimeout):
        return "timeout"
    if isinstance(exc, MemoryError):
        return "memory limit"
    name = type(exc).__name__
    try:  # str() may run candidate code (a custom __str__): the caller keeps its timer armed
        text = f"{exc.msg} (line {exc.lineno})" if isinstance(exc, SyntaxError) else str(exc)
    except BaseException:  # noqa: BLE001 -- whatever a broken __str__ raises, the line names the type
        text = ""
    line = f"{name}: {text}" if text else name
    return " ".join(line.split())[:ERROR_CHARS]


# ------------------------------------------------------------------------------------------------ walls


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _call(libc: Any, name: str, *args: Any) -> None:
    if getattr(libc, name)(*args) != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _bind(libc: Any, source: str, root: str, writable: bool = False) -> None:
    """Bind `source` at the same path under `root`, read-only unless `writable`; device nodes keep working."""
    target = root + source
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "wb").close()
    _call(libc, "mount", source.encode(), target.encode(), None, MS_BIND, None)
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | (0 if writable else MS_RDONLY | MS_NODEV)
    _call(libc, "mount", None, target.encode(), None, flags, None)


def _build_root(libc: Any, root: str, uid: int | None, tmp_mb: int) -> str:
    """In a fresh mount namespace, chroot into a tmpfs holding read-only /usr and the interpreter, four device
    nodes, a /proc that shows only this uid's processes, and a private /tmp; return the new /tmp."""
    _call(libc, "mount", None, b"/", None, MS_REC | MS_PRIVATE, None)  # nothing below propagates to the host
    options = f"size={tmp_mb}m,nr_inodes=4096,mode=755".encode()
    # noexec: what the candidate writes to /tmp can be neither executed nor loaded as a library
    _call(libc, "mount", b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options)
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):  # merged-/usr links, or real directories
        if os.path.islink("/" + name):
            os.symlink(os.readlink("/" + name), f"{root}/{name}")
        elif os.path.isdir("/" + name):
            _bind(libc, "/" + name, root)
    _bind(libc, "/usr", root)
    prefix = os.path.realpath(sys.base_prefix)
    if prefix != "/usr" and not prefix.startswith("/usr/"):
        _bind(libc, prefix, root)
    for device in ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"):
        _bind(libc, device, root, writable=True)
    os.mkdir(root + "/proc")
    try:  # hidepid=2: /proc/<pid> of other users (the parent) does not even exist
        _call(
            libc,
            "mount",
            b"proc",
            f"{root}/proc".encode(),
            b"proc",
            MS_NOSUID | MS_NODEV | MS_NOEXEC,
            b"hidepid=2",
        )
    except OSError:
        os.rmdir(root + "/proc")
    os.mkdir(root + "/tmp", 0o700)
    if uid is not None:
        os.chown(root + "/tmp", uid, uid)
    os.chroot(root)
    os.chdir("/tmp")
    return "/tmp"


def _landlock(libc: Any, home: str, writable_home: bool) -> None:
    """Restrict this process and its future threads, whatever its uid: read the interpreter, the system
    libraries and its directory; write only there (and only if `writable_home`) and to /dev/null; no TCP;
    no signals, ptrace or abstract sockets reaching outside. Raises OSError where the kernel has no Landlock."""
    import ctypes

    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(
        ctypes.c_long(LANDLOCK_CREATE_RULESET),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION),
    )
    if abi < 1:
        raise OSError(ctypes.get_errno(), "landlock: not enabled in this kernel")
    fs = FS_BY_ABI[max(k for k in FS_BY_ABI if k <= abi)]
    fields = [fs] + ([NET_TCP] if abi >= 4 else []) + ([SCOPE_UNIX_AND_SIGNAL] if abi >= 6 else [])
    attr = (ctypes.c_uint64 * len(fields))(*fields)
    ruleset = syscall(
        ctypes.c_long(LANDLOCK_CREATE_RULESET),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
        ctypes.c_uint32(0),
    )
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    read_dir, read_file = FS_READ_FILE | FS_READ_DIR, FS_READ_FILE
    write_dir = (
        FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_DIR | FS_MAKE_REG | (fs & FS_TRUNCATE)
    )
    rules = [(home, read_dir | (write_dir if writable_home else 0))]
    rules += [(p, read_dir) for p in ("/usr", "/lib", "/lib64", "/lib32", "/libx32", sys.base_prefix)]
    rules += [(p, read_file) for p in ("/etc/ld.so.cache", "/etc/localtime", "/dev/urandom", "/dev/random")]
    rules += [(p, read_file | FS_WRITE_FILE | (fs & FS_TRUNCATE)) for p in ("/dev/null", "/dev/zero")]
    try:
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # not on this system (/lib32), or hidden by the chroot
            try:
                rule = PathBeneath(access & fs, fd)
                if syscall(
                    ctypes.c_long(LANDLOCK_ADD_RULE),
                    ctypes.c_int(ruleset),
                    ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                    ctypes.byref(rule),
                    ctypes.c_uint32(0),
                ):
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule({path})")
            finally:
                os.close(fd)
        if syscall(ctypes.c_long(LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)):
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def seccomp_program(arch: str, pid: int, threads: bool, harness: bool = False) -> bytes:
    """A classic BPF program for seccomp: kill on a foreign architecture (x32 included); EPERM for the refused
    syscalls, for signals and pidfds aimed at any process but `pid`, and for clone unless it starts a thread
    (`threads`); ENOSYS for clone3, whose flags it cannot read (glibc then falls back to clone); allow the rest.
    A session's `harness`, which runs no candidate code, may fork and signal the processes that run its cells;
    each of those installs the full program over this one (filters stack: the stricter answer holds)."""
    audit_arch, refused, own_pid_only, clones = SYSCALLS[arch]
    errno_eperm, errno_enosys = 0x00050000 | 1, 0x00050000 | 38
    out: list[tuple[int, int, int, int]] = [
        (BPF_LD_ABS, 0, 0, 4),  # seccomp_data.arch
        (BPF_JEQ, 1, 0, audit_arch),
        (BPF_RET, 0, 0, SECCOMP_KILL),
        (BPF_LD_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if arch == "x86_64":
        out += [(BPF_JGE, 0, 1, 0x40000000), (BPF_RET, 0, 0, SECCOMP_KILL)]  # the x32 ABI's numbers
    for nr in refused.values():
        out += [(BPF_JEQ, 0, 1, nr), (BPF_RET, 0, 0, errno_eperm)]
    out += [(BPF_JEQ, 0, 1, clones["clone3"]), (BPF_RET, 0, 0, errno_enosys)]
    if harness:
        out += [(BPF_RET, 0, 0, SECCOMP_ALLOW)]
        return _bpf(out)
    # clone: flags are argument 0 (low 32 bits at offset 16); a thread keeps CLONE_THREAD
    if threads:
        out += [(BPF_JEQ, 0, 4, clones["clone"]), (BPF_LD_ABS, 0, 0, 16), (BPF_JSET, 1, 0, CLONE_THREAD)]
        out += [(BPF_RET, 0, 0, errno_eperm), (BPF_RET, 0, 0, SECCOMP_ALLOW)]
    else:
        out += [(BPF_JEQ, 0, 1, clones["clone"]), (BPF_RET, 0, 0, errno_eperm)]
    for name, nr in own_pid_only.items():
        allowed = (pid, 0) if name == "kill" else (pid,)
        # nr? -> load argument 0; an allowed value -> allow, else EPERM. Not nr: on to the next rule.
        out += [(BPF_JEQ, 0, len(allowed) + 3, nr), (BPF_LD_ABS, 0, 0, 16)]
        out += [(BPF_JEQ, len(allowed) - i, 0, value) for i, value in enumerate(allowed)]
        out += [(BPF_RET, 0, 0, errno_eperm), (BPF_RET, 0, 0, SECCOMP_ALLOW)]
    out += [(BPF_RET, 0, 0, SECCOMP_ALLOW)]
    return _bpf(out)


def _bpf(program: list[tuple[int, int, int, int]]) -> bytes:
    import struct

    return b"".join(struct.pack("<HBBI", *insn) for insn in program)


def _seccomp(libc: Any, threads: bool, harness: bool = False) -> None:
    """Install `seccomp_program` for this process (no_new_privs must be set). OSError if the kernel refuses."""
    import ctypes
    import platform

    arch = platform.machine()
    if arch not in SYSCALLS:
        raise OSError(0, f"seccomp: no syscall table for {arch}")
    program = seccomp_program(arch, os.getpid(), threads, harness)
    code = ctypes.create_string_buffer(program, len(program))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Fprog(len(program) // 8, ctypes.addressof(code))
    _call(libc, "prctl", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0)


def contained(layers: list[str] | tuple[str, ...]) -> list[str]:
    """The kinds of escape no kernel layer among `layers` stops (empty when the walls hold without the hook)."""
    return [kind for kind, any_of in CONTAINMENT.items() if not set(any_of) & set(layers)]


def _reachable_by_others(path: str) -> bool:
    """Whether a uid with no rights of its own can read `path` (every directory above it searchable)."""
    path = os.path.realpath(path)
    while True:
        if not os.stat(path).st_mode & 0o005:
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)


def put_up_walls(setup: dict[str, Any], harness: bool = False) -> tuple[list[str], str, Any]:
    """Apply every layer the kernel allows; return the names of those that hold, the private directory and libc
    (None where ctypes cannot load it). A session's `harness` keeps one more process for the cell it runs, may
    fork and signal it (its cells' processes close that door behind them: `enclose_cell`), and cannot be traced
    or read through /proc by them."""
    layers: list[str] = []
    want = setup["layers"]  # all of them, except in tests that check one defence without the others
    home = os.getcwd()
    uid = setup["uid"]  # set by the parent when it runs as root: the uid this sandbox drops to
    try:
        libc = _libc()
    except OSError:
        libc = None
    if libc is not None:
        if "nonewprivs" in want:
            try:
                _call(
                    libc, "prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0
                )  # no setuid binary gives privileges back
                layers.append("nonewprivs")
            except OSError:
                pass
        flags = CLONE_NEWNET | CLONE_NEWNS if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET
        if "netns" in want:
            try:
                _call(libc, "unshare", flags)
                layers.append("netns")
            except OSError:
                pass
        if os.geteuid() == 0 and "netns" in layers and "chroot" in want:
            try:
                home = _build_root(libc, setup["root"], uid, setup["tmp_mb"])
                layers.append("chroot")
            except OSError:
                home = os.getcwd()  # a partly built root is left unused: the cwd is still the host directory

    import resource

    limits = setup["limits"]
    for name, soft, hard in (
        ("RLIMIT_CPU", limits["cpu"], limits["cpu"] + 1),  # SIGXCPU at soft, SIGKILL at hard
        ("RLIMIT_FSIZE", limits["file"], limits["file"]),
        (
            "RLIMIT_NPROC",
            limits["processes"] + harness,
            limits["processes"] + harness,
        ),  # binds a non-root uid
        ("RLIMIT_NOFILE", 64, 64),
        ("RLIMIT_CORE", 0, 0),
        ("RLIMIT_AS", limits["memory"], limits["memory"]),
    ):
        kind = getattr(resource, name)
        ceiling = resource.getrlimit(kind)[1]  # a non-root process cannot raise a hard limit it was given
        if ceiling != resource.RLIM_INFINITY:
            hard = min(hard, ceiling)
        resource.setrlimit(kind, (min(soft, hard), hard))
    layers.append("rlimits")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past file_mb fails with EFBIG instead of killing

    if uid is not None and "uid" in want and ("chroot" in layers or _reachable_by_others(sys.base_prefix)):
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        layers.append("uid")
    if libc is not None:  # after the uid change, which clears them: die with the parent; no tracing by a cell
        with contextlib.suppress(OSError):
            _call(libc, "prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if harness:
            with contextlib.suppress(OSError):
                _call(libc, "prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    if os.getppid() != setup["parent"]:
        os._exit(1)
    # Without namespaces these two are the walls (with them, a second one): both need no_new_privs, no root.
    if libc is not None and "nonewprivs" in layers and "landlock" in want:
        try:  # a private directory on the host's disk gets no writes: nothing there would bound their total
            _landlock(libc, home, writable_home="chroot" in layers)
            layers.append("landlock")
        except OSError:
            pass
    if libc is not None and "nonewprivs" in layers and "seccomp" in want:
        try:
            _seccomp(libc, threads=limits["processes"] > 1, harness=harness)
            layers.append("seccomp")
        except OSError:
            pass
    if not harness:  # a session's cells' processes use it, then drop it (`enclose_cell`)
        _forget_ctypes()
    return layers, home, libc


def _forget_ctypes() -> None:
    for module in ("ctypes", "_ctypes", "ctypes._endian"):  # loaded here; candidates must import it anew
        sys.modules.pop(module, None)


def install_audit_hook(home: str) -> None:
    """Refuse, at the Python level, what the kernel layers refuse too: processes, sockets, ctypes, writes
    outside `home`, reads outside `home` and the standard library. Not a boundary against native code."""
    home = os.path.realpath(home)
    readable = [home, os.path.realpath(sys.base_prefix), "/usr/share/zoneinfo", f"/proc/{os.getpid()}"]
    readable += [os.path.realpath(p) for p in sys.path if p]
    devices = {"/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"}
    me = os.getpid()
    realpath, fspath, isdir = os.path.realpath, os.fspath, os.path.isdir

    def inside(path: str, roots: list[str]) -> bool:
        return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)

    def resolve(raw: Any) -> str:
        text = os.fsdecode(fspath(raw))
        if not text.startswith("/") and ".." in text.replace("\\", "/").split("/"):
            raise PermissionError(f"sandbox: '..' in a relative path ({text})")
        return realpath(text)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            raw, mode, flags = args
            if isinstance(raw, int):
                return
            path = resolve(raw)
            writes = bool((flags or 0) & WRITE_FLAGS) or any(c in (mode or "") for c in "wax+")
            if inside(path, [home]) or path in devices:
                return
            if writes:
                raise PermissionError(f"sandbox: writing outside its directory ({path})")
            if not inside(path, readable) or isdir(path):
                raise PermissionError(f"sandbox: reading outside its directory ({path})")
        elif event in ("os.listdir", "os.scandir"):
            if args and args[0] is not None and not isinstance(args[0], int):
                path = resolve(args[0])
                if not inside(path, readable):
                    raise PermissionError(f"sandbox: listing outside its directory ({path})")
        elif event in MUTATING_EVENTS:
            paths, dir_fds = MUTATING_EVENTS[event]
            if any(i < len(args) and args[i] not in (None, -1) for i in dir_fds):
                raise PermissionError(f"sandbox: {event} with dir_fd refused")
            for raw in args[:paths]:
                if isinstance(raw, int) and event == "os.truncate":
                    continue  # ftruncate: the descriptor was opened for writing, through this hook
                if isinstance(raw, int) or not inside(resolve(raw), [home]):
                    raise PermissionError(f"sandbox: {event} outside its directory")
        elif event == "import":
            # (module, filename, ...): a filename in the private directory is an extension the candidate wrote
            if args[0] in REFUSED_IMPORTS or (isinstance(args[1], str) and inside(realpath(args[1]), [home])):
                raise PermissionError(f"sandbox: import of {args[0]} refused")
        elif event == "os.kill":
            if args[0] not in (0, me):
                raise PermissionError("sandbox: signals to other processes refused")
        elif event.startswith(REFUSED_EVENTS):
            raise PermissionError(f"sandbox: {event} refused")

    sys.addaudithook(hook)
    for module in (os, sys.modules.get("posix")):  # file creation that raises no audit event
        for name in ("mkfifo", "mknod"):
            if module is not None and hasattr(module, name):
                delattr(module, name)


# ------------------------------------------------------------------------------------------------ serving


class _Timer:
    """A per-request wall-clock budget: SIGALRM raises CaseTimeout into Python code while armed."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.armed = seconds, False
        signal.signal(signal.SIGALRM, self._fire)

    def _fire(self, signum: int, frame: Any) -> None:
        if self.armed:  # a late signal after disarm() is dropped
            self.armed = False
            raise CaseTimeout

    def arm(self) -> None:
        self.armed = True
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def disarm(self) -> None:
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)


def _exec(request: dict[str, Any], namespace: dict[str, Any]) -> dict[str, Any]:
    """Run a source; answer {} or, asked for the value of its last expression, that value encoded."""
    source = request["source"]
    if request.get("value"):
        import ast

        tree = ast.parse(source, "<candidate>")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, "<candidate>", "exec"), namespace)  # noqa: S102 -- running it is the point
        if last is None:
            return {"value": None}
        return encode(eval(compile(ast.Expression(last.value), "<candidate>", "eval"), namespace))  # noqa: S307
    exec(compile(source, "<candidate>", "exec"), namespace)  # noqa: S102
    name = request.get("function")
    if name is not None and not callable(namespace.get(name)):
        return {"error": f"NameError: the code defines no function {name!r}"}
    return {}


def answer(request: dict[str, Any], namespace: dict[str, Any], timer: _Timer) -> dict[str, Any]:
    """One request under the timer, including the candidate code that encoding or naming an error may run."""
    try:
        timer.arm()
        try:
            if request["op"] == "exec":
                return _exec(request, namespace)
            return encode(namespace[request["function"]](*request["args"]))
        except BaseException as exc:  # noqa: BLE001 -- SystemExit and KeyboardInterrupt included
            return {"error": error_line(exc)}
        finally:
            timer.disarm()
    except CaseTimeout:  # fired while an error was being named
        return {"error": "timeout"}


def serve(requests: list[dict[str, Any]], out_fd: int, seconds: float) -> None:
    """Answer each request in order in one namespace; stop after a failed exec (later calls would be noise)."""
    namespace: dict[str, Any] = {"__name__": "candidate", "__builtins__": __builtins__}
    timer = _Timer(seconds)
    for request in requests:
        reply = answer(request, namespace, timer)
        write_frame(out_fd, reply)
        if request["op"] == "exec" and "error" in reply:
            return


def write_frame(fd: int, obj: dict[str, Any]) -> None:
    write_frame_bytes(fd, json.dumps(obj).encode())


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def read_exact(fd: int, size: int) -> bytes | None:
    """`size` bytes from `fd`, or None if it closes first."""
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def read_frame(fd: int) -> Any:
    """One length-prefixed JSON frame from the parent; None when the pipe closes."""
    head = read_exact(fd, 4)
    body = read_exact(fd, int.from_bytes(head, "big")) if head is not None else None
    return json.loads(body) if body is not None else None


# ------------------------------------------------------------------------------------------------ session


class _Link:
    """The one door from the cell to the world: each API call is a JSON frame out and a reply frame in, matched
    by a sequence number, so a reply that a timed-out call left in the pipe is never taken for a later one."""

    def __init__(self, in_fd: int, out_fd: int) -> None:
        self.in_fd, self.out_fd, self.seq = in_fd, out_fd, 0

    def call(self, app: str, api: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.seq += 1
        try:
            frame = json.dumps({"call": [app, api, list(args), kwargs], "id": self.seq}, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            raise TypeError(
                f"apis.{app}.{api}: arguments must be plain data (str, int, float, bool, None, and lists and "
                "dicts of them)"
            ) from None
        write_frame_bytes(self.out_fd, frame.encode())
        while True:
            reply = read_frame(self.in_fd)
            if reply is None:
                os._exit(0)  # the parent is gone
            if reply.get("id") == self.seq:
                break
        if "error" in reply:
            raise Exception(reply["error"])  # AppWorld's APIs raise plain Exception  # noqa: TRY002
        return reply.get("value")


class _App:
    """`apis.<app>`: any attribute is an API of that app; whether it exists is the world's to say."""

    def __init__(self, link: _Link, name: str) -> None:
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_name", name)

    def __getattr__(self, api: str) -> Any:
        if api.startswith("__"):
            raise AttributeError(api)
        link, app = self._link, self._name

        def call(*args: Any, **kwargs: Any) -> Any:
            return link.call(app, api, args, kwargs)

        call.__name__ = call.__qualname__ = f"{app}.{api}"
        return call

    def __repr__(self) -> str:
        return f"<app {self._name}>"


class _Apis:
    def __init__(self, link: _Link) -> None:
        object.__setattr__(self, "_link", link)

    def __getattr__(self, app: str) -> _App:
        if app.startswith("__"):
            raise AttributeError(app)
        return _App(self._link, app)

    def __repr__(self) -> str:
        return "<apis: apis.<app>.<api>(...); list the apps with apis.api_docs.show_app_descriptions()>"


def failure(exc: BaseException, source: str) -> str:
    """An error as AppWorld's REPL reports it: "Execution failed. Traceback:", the cell's own frames, the error."""
    import traceback

    lines = source.splitlines()
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<cell>"]
    if isinstance(exc, SyntaxError) and exc.filename == "<cell>":
        frames = [traceback.FrameSummary("<cell>", exc.lineno or 0, "<module>")]
    shown = []
    for f in frames[-3:]:
        code = lines[f.lineno - 1].strip() if f.lineno and 0 < f.lineno <= len(lines) else ""
        shown.append(f"  line {f.lineno}, in {f.name}" + (f"\n    {code}" if code else ""))
    last = "TimeoutError: the cell ran out of time" if isinstance(exc, CaseTimeout) else error_line(exc)
    return "\n".join(["Execution failed. Traceback:", *shown, last])


def run_cell(source: str, namespace: dict[str, Any], timer: _Timer) -> str | None:
    """Exec one cell under the timer, then collect its garbage (so its finalizers run in its own turn); its
    error, or None. What it prints goes straight to fd 1, which the parent reads: no frame carries output."""
    import gc

    error = None
    try:
        try:
            timer.arm()
            try:
                exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102 -- running it is the point
            finally:
                gc.collect()
        except BaseException as exc:  # noqa: BLE001 -- SystemExit and KeyboardInterrupt included
            error = failure(exc, source)
        finally:
            timer.disarm()
    except CaseTimeout:  # fired while the error was being named
        error = "Execution failed. Traceback:\nTimeoutError: the cell ran out of time"
    return error


STATE_BYTES = 32 << 20  # the pickled namespace a session keeps between cells, at most
MAX_UNANSWERED = 4  # calls passed to the parent and not yet answered; the harness holds the cell's next ones
GRACE = 0.5  # seconds a cell's process has past case_seconds (loading and pickling its namespace)
PICKLER = "cloudpickle.cloudpickle"  # the module name the parent's cloudpickle source is loaded as
ANCHOR = "__gymflow_globals__"  # see `_dump`


def session(in_fd: int, out_fd: int, setup: dict[str, Any], layers: list[str], home: str, libc: Any) -> None:
    """A persistent interpreter whose every cell runs in a process of its own. For each {"cell": source,
    "token": t}: answer {"start": t}; fork a process that loads the namespace the last cell left, runs the cell
    and sends the namespace back pickled; pass its API calls to the parent and the replies back; kill it; answer
    {"done": t, "error": ...}. This process runs no candidate code and loads no pickle, and the cell's process
    has none of its pipes to the parent, so a cell can neither write a frame the parent reads as the harness's
    nor read the next request, and whatever it starts (a timer, a hook, code after a forged done) dies with it
    when its turn ends. A cell that dies or runs out of time leaves the namespace as it was before it."""
    pickler = _load_pickler(setup["pickler"])
    for stream in (sys.stdout, sys.stderr):  # any str prints (a lone surrogate too)
        stream.reconfigure(errors="backslashreplace")
    requests = _Frames(in_fd)
    state, cpu_left = _empty(pickler), float(setup["limits"]["cpu"])
    import gc

    gc.freeze()  # the cells' processes collect their own garbage without touching (and copying) these objects
    while (frame := requests.next()) is not None:
        request = json.loads(frame)
        if not (isinstance(request, dict) and isinstance(request.get("cell"), str)):
            continue  # a reply to a call of a cell whose process is gone
        token = request.get("token")
        write_frame(out_fd, {"start": token})
        if cpu_left <= 0:
            error = "Execution failed. Traceback:\nRuntimeError: the episode's CPU time is spent"
        else:
            cell = _CellProcess(request["cell"], state, setup, layers, home, libc, cpu_left, in_fd, out_fd)
            error, left, spent = cell.serve(requests)
            state, cpu_left = left if left is not None else state, cpu_left - spent
        write_frame(out_fd, {"done": token, "error": error})


class _Frames:
    """Length-prefixed frames read off `fd` whole, whether one is waited for or taken as bytes arrive."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer = fd, bytearray()

    def next(self) -> bytes | None:
        """The next frame, waiting for it; None when the pipe closes."""
        while (frame := self.take()) is None:
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        return frame

    def take(self) -> bytes | None:
        """The next frame if it has all arrived (after a read into `buffer`), else None."""
        if len(self.buffer) < 4:
            return None
        size = int.from_bytes(self.buffer[:4], "big")
        if len(self.buffer) < 4 + size:
            return None
        frame = bytes(self.buffer[4 : 4 + size])
        del self.buffer[: 4 + size]
        return frame


class _CellProcess:
    """One cell's process and the harness's side of its turn."""

    def __init__(self, source: str, state: bytes, setup: dict[str, Any], layers: list[str], home: str,
                 libc: Any, cpu_left: float, in_fd: int, out_fd: int) -> None:  # fmt: skip
        to_cell_r, self.to_cell = os.pipe()
        self.from_cell, from_cell_w = os.pipe()
        self.out_fd, self.seconds, harness = out_fd, setup["seconds"], os.getpid()
        self.pid = os.fork()
        if self.pid == 0:  # the cell's process: it never returns
            try:
                os.close(self.to_cell)
                os.close(self.from_cell)
                os.dup2(
                    to_cell_r, in_fd
                )  # the parent's pipes are closed here; the cell sees the numbers it knew
                os.dup2(from_cell_w, out_fd)
                os.close(to_cell_r)
                os.close(from_cell_w)
                enclose_cell(harness, setup, layers, home, libc, cpu_left)
                run_cell_process(source, state, in_fd, out_fd, setup["seconds"])
            finally:
                os._exit(0)
        os.close(to_cell_r)
        os.close(from_cell_w)

    def serve(self, requests: _Frames) -> tuple[str | None, bytes | None, float]:
        """Relay the turn until the cell's done frame (or its death, or its time), then kill the process:
        (the cell's error, the namespace it left or None where it sent none, the CPU seconds it spent)."""
        try:
            error, state = self._relay(requests)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            _, status, usage = os.wait4(self.pid, 0)
            os.close(self.from_cell)
            os.close(self.to_cell)
        spent = usage.ru_utime + usage.ru_stime
        if state is None:  # no done frame: the variables stay as they were before the cell
            why = error or _ended(status)
            return f"Execution failed. Traceback:\n{why}; the variables are as before this cell", None, spent
        return error, state, spent

    def _relay(self, requests: _Frames) -> tuple[str | None, bytes | None]:
        """Pass the cell's call frames to the parent and the parent's replies to the cell: (error, state) from
        its done frame, or (why, None) where it broke off."""
        import selectors
        import time

        from_cell, to_cell, unanswered = _Frames(self.from_cell), bytearray(), 0
        deadline = time.monotonic() + self.seconds + GRACE
        os.set_blocking(self.to_cell, False)
        with selectors.DefaultSelector() as selector:
            selector.register(requests.fd, selectors.EVENT_READ)
            while True:
                # calls go on to the parent while few are unanswered, so what it queues for a cell that does
                # not read its replies stays small, and the cell meets this process's bound (to_cell) first
                while unanswered < MAX_UNANSWERED and (frame := from_cell.take()) is not None:
                    done = self._pass(frame)
                    if done is not None:
                        return done
                    unanswered += 1  # a frame that does not end the turn is a call passed on
                _watch(selector, self.from_cell, selectors.EVENT_READ, unanswered < MAX_UNANSWERED)
                _watch(selector, self.to_cell, selectors.EVENT_WRITE, bool(to_cell))
                left = deadline - time.monotonic()
                if left <= 0:
                    return "TimeoutError: the cell ran out of time", None
                for key, _ in selector.select(left):
                    if key.fd == self.to_cell:
                        with contextlib.suppress(BlockingIOError, BrokenPipeError):
                            del to_cell[: os.write(self.to_cell, to_cell[: 1 << 16])]
                    elif key.fd == requests.fd:
                        if not _read_all(requests):
                            os._exit(0)  # the parent is gone: so is this process, and the cell's with it
                        while (reply := requests.take()) is not None:
                            to_cell += len(reply).to_bytes(4, "big") + reply
                            unanswered = max(unanswered - 1, 0)  # (a late reply to an earlier cell)
                        if len(to_cell) > MAX_FRAME * 4:  # below what the parent queues (MAX_PENDING)
                            return "RuntimeError: the cell left too many replies unread", None
                    else:
                        chunk = os.read(self.from_cell, 1 << 16)
                        if not chunk:
                            return None, None  # it ended without a done frame
                        from_cell.buffer += chunk
                        if int.from_bytes(from_cell.buffer[:4].ljust(4, b"\0"), "big") > STATE_BYTES * 2:
                            return "RuntimeError: the cell wrote a frame too large to be one", None

    def _pass(self, frame: bytes) -> tuple[str | None, bytes | None] | None:
        """A call frame goes to the parent as it is (the parent checks it); a done frame ends the turn."""
        try:
            obj = json.loads(frame)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and "call" in obj and len(frame) <= MAX_FRAME:
            write_frame_bytes(self.out_fd, frame)
            return None
        if isinstance(obj, dict) and obj.keys() == {"done", "error", "state"}:
            error, state = obj["error"], obj["state"]
            if (error is None or isinstance(error, str)) and isinstance(state, str):
                import base64

                with contextlib.suppress(ValueError):
                    return error, base64.b64decode(state, validate=True)
        return "RuntimeError: the cell wrote a malformed frame", None


def _watch(selector: Any, fd: int, events: int, on: bool) -> None:
    """Watch `fd` for `events` while `on`, else not."""
    if on and fd not in selector.get_map():
        selector.register(fd, events)
    elif not on and fd in selector.get_map():
        selector.unregister(fd)


def _read_all(frames: _Frames) -> bool:
    """Read what the parent has written so far into `frames.buffer` (the parent's replies must not wait in its
    queue while the harness passes on calls); False when its pipe has closed."""
    os.set_blocking(frames.fd, False)
    try:
        while True:
            try:
                chunk = os.read(frames.fd, 1 << 16)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            frames.buffer += chunk
    finally:
        os.set_blocking(frames.fd, True)


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"RuntimeError: the cell's process was killed (signal {os.WTERMSIG(status)})"
    return f"RuntimeError: the cell's process exited (code {os.waitstatus_to_exitcode(status)})"


def enclose_cell(
    harness: int, setup: dict[str, Any], layers: list[str], home: str, libc: Any, cpu_left: float
) -> None:
    """Close, in the cell's process and before any candidate code, what the harness keeps open: die with the
    harness, no further process (RLIMIT_NPROC of the uid, and seccomp's full program, whose signal rules name
    this process), the episode's CPU time left, and the audit hook."""
    import math
    import resource

    if libc is not None:
        _call(libc, "prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != harness:
        os._exit(1)
    processes = setup["limits"]["processes"]
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    seconds = max(1, math.ceil(cpu_left))
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
    if "seccomp" in layers:
        _seccomp(libc, threads=False)  # an OSError here ends the process: no candidate code runs
    _forget_ctypes()
    if "audit" in layers:
        install_audit_hook(home)


def run_cell_process(source: str, state: bytes, in_fd: int, out_fd: int, seconds: float) -> None:
    """Load the namespace, run the cell, send {"done": true, "error": ..., "state": the namespace pickled}."""
    import base64

    pickler = sys.modules[PICKLER]
    apis = _Apis(_Link(in_fd, out_fd))
    try:
        if not state:  # a done frame a cell wrote itself may send none: it has no names
            state = _empty(pickler)
        loaded = pickler.loads(state)
        namespace = loaded.pop(ANCHOR).__globals__  # the globals every loaded function shares
        namespace.update(loaded)
    except BaseException as exc:  # noqa: BLE001 -- a value's own loader may raise anything
        print(f"[the variables could not be restored, so none are: {error_line(exc)}]")
        namespace = {}
    namespace.update({"__name__": "__main__", "__builtins__": __builtins__, "apis": apis})
    error = run_cell(source, namespace, _Timer(seconds))
    kept, lost = _dump(namespace, pickler, apis)
    if lost:
        print(f"[not kept for the next cell, as they cannot be pickled: {', '.join(lost)}]")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    write_frame(out_fd, {"done": True, "error": error, "state": base64.b64encode(kept).decode()})


def _dump(namespace: dict[str, Any], pickler: Any, apis: Any) -> tuple[bytes, list[str]]:
    """The namespace pickled (by value: functions and classes the cells defined too), and the names left out:
    those that cannot be pickled (a generator, an open file), or all of them past STATE_BYTES. Beside the names
    goes ANCHOR, a function of the namespace: loaded, its globals are the dict every loaded function reads its
    globals from, which the next cell then runs in (so `x += 1` is what a function defined earlier sees)."""
    import types

    keep = {k: v for k, v in namespace.items() if k not in ("__name__", "__builtins__") and v is not apis}
    keep[ANCHOR] = types.FunctionType(compile("None", "<anchor>", "eval"), namespace)
    lost = []
    for _ in range(2):  # all at once (shared references stay shared); else find the ones that fail
        try:
            data = pickler.dumps(keep)
        except BaseException:  # noqa: BLE001 -- a value's own reducer may raise anything
            for name in list(keep):
                try:
                    pickler.dumps(keep[name])
                except BaseException:  # noqa: BLE001
                    lost.append(name)
                    del keep[name]
            continue
        if len(data) > STATE_BYTES:
            return _empty(pickler), sorted(set(keep) - {ANCHOR})
        return data, lost
    return _empty(pickler), sorted({*lost, *keep} - {ANCHOR})


def _empty(pickler: Any) -> bytes:
    """A namespace with no names, as `_dump` writes one."""
    return _dump({}, pickler, None)[0]


def _load_pickler(source: str) -> Any:
    """cloudpickle (the parent sends its source: this interpreter sees the standard library only), loaded as the
    module its pickles name."""
    import types

    module = types.ModuleType(PICKLER)
    sys.modules[PICKLER] = sys.modules["cloudpickle"] = module
    exec(compile(source, "cloudpickle.py", "exec"), module.__dict__)  # noqa: S102 -- the parent's own package
    return module


def write_frame_bytes(fd: int, data: bytes) -> None:
    data = len(data).to_bytes(4, "big") + data
    while data:
        data = data[os.write(fd, data) :]


def _lowest(fd: int) -> int:
    """`fd` moved to the lowest free number. The parent's numbers can be past RLIMIT_NOFILE (64) when it holds
    many descriptors (an evaluation with dozens of sessions), and a cell's process `dup2`s its pipes onto them,
    which the kernel refuses (EBADF) for a number past the limit: every cell of such a session failed."""
    low = os.dup(fd)
    if low > fd:
        os.close(low)
        return fd
    os.set_inheritable(low, True)
    os.close(fd)
    return low


def main(in_fd: int, out_fd: int, mode: str = "requests") -> None:
    """`requests`: the parent writes one pickled payload and closes the pipe. `session`: a length-prefixed
    pickled setup, then JSON frames (cells, API replies) for as long as the episode lasts."""
    in_fd, out_fd = _lowest(in_fd), _lowest(out_fd)
    sys.argv[1:3] = [str(in_fd), str(out_fd)]  # the arguments still name the pipes
    if mode == "session":
        head = read_exact(in_fd, 4) or b"\0\0\0\0"
        payload = pickle.loads(read_exact(in_fd, int.from_bytes(head, "big")) or b"")
    else:
        payload = pickle.loads(
            read_all(in_fd)
        )  # from the parent, which the child trusts; never the other way
    setup = payload["setup"]
    layers, home, libc = put_up_walls(setup, harness=mode == "session")
    if "audit" in setup["layers"]:
        if mode != "session":  # a session's harness runs no candidate code: each cell's process installs it
            install_audit_hook(home)
        layers.append("audit")
    missing = contained(layers)
    if missing and not setup["trusted"]:  # fail closed: no candidate code runs
        write_frame(out_fd, {"layers": layers, "refused": missing})
        os._exit(0)
    write_frame(out_fd, {"layers": layers})
    if mode == "session":
        session(in_fd, out_fd, setup, layers, home, libc)
    else:
        serve(payload["requests"], out_fd, setup["seconds"])
    sys.stdout.flush()
    os._exit(0)  # no atexit handlers or finalizers of candidate objects run after the answers


def parse_args() -> tuple[int, int, str]:
    """IN OUT [MODE] as the parent passes them; `--help` says what they are (imported here: the parent, which
    imports `encode` from this file, has no use for argparse)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m gymflow.sandbox.child",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("in_fd", metavar="IN", type=int, help="the pipe's descriptor the parent writes to")
    parser.add_argument("out_fd", metavar="OUT", type=int, help="the pipe's descriptor the answers go to")
    parser.add_argument(
        "mode", nargs="?", choices=["requests", "session"], default="requests", help="%(choices)s"
    )
    args = parser.parse_args()
    return args.in_fd, args.out_fd, args.mode


if __name__ == "__main__":
    main(*parse_args())
