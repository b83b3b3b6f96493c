#!/usr/bin/env python3
"""Runs a command inside an image root filesystem the way the DaemonSets' security context runs
the plugin: uid 0 with EVERY capability dropped (bounding, permitted, effective, inheritable),
no_new_privs (allowPrivilegeEscalation: false), a read-only root filesystem, and only the
kubelet's device-plugin directory writable. No container engine needed; must start as root.

Usage: run-confined.py ROOTFS WRITABLE_DIR -- COMMAND [ARG...]
  WRITABLE_DIR is a path inside ROOTFS (e.g. /var/lib/kubelet/device-plugins).
Before running COMMAND it proves the confinement: writing to / fails with EROFS and the
effective capability set is empty; otherwise it exits 3.
"""

import ctypes
import errno
import os
import sys

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
LINUX_CAPABILITY_VERSION_3 = 0x20080522

libc = ctypes.CDLL(None, use_errno=True)


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        sys.exit(f"run-confined: {what}: {os.strerror(err)}")


def mount(source, target, flags):
    check(libc.mount(source and source.encode(), target.encode(), None, flags, None), f"mount {target}")


def main():
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit(__doc__)
    rootfs, writable, command = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[4:]

    # A private mount namespace: the read-only bind of the rootfs vanishes with the process.
    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    mount(None, "/", MS_REC | MS_PRIVATE)
    mount(rootfs, rootfs, MS_BIND | MS_REC)
    inner = rootfs + "/" + writable.lstrip("/")
    mount(inner, inner, MS_BIND)
    mount(None, rootfs, MS_REMOUNT | MS_BIND | MS_RDONLY)
    os.chroot(rootfs)
    os.chdir("/")

    # Capabilities: empty the bounding set (so exec cannot grant any back to uid 0), then the
    # permitted, effective and inheritable sets; no_new_privs as allowPrivilegeEscalation: false.
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    header = CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (CapData * 2)()
    check(libc.capset(ctypes.byref(header), data), "capset")

    # Prove it before running anything.
    try:
        with open("/.confinement-probe", "w", encoding="utf-8"):
            pass
        sys.exit(3)  # not reached when the root is read-only
    except OSError as error:
        if error.errno != errno.EROFS:
            print(f"run-confined: / is not read-only ({error})", file=sys.stderr)
            sys.exit(3)
    got = (CapData * 2)()
    check(libc.capget(ctypes.byref(header), got), "capget")
    if any(d.effective or d.permitted for d in got):
        print("run-confined: capabilities are still set", file=sys.stderr)
        sys.exit(3)
    print(f"run-confined: uid {os.getuid()}, no capabilities, no_new_privs, read-only /, writable {writable}",
          file=sys.stderr)
    sys.stderr.flush()
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
