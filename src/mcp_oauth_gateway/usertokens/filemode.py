"""Who besides the gateway may touch a file holding users' grants or the keys sealing them."""

from __future__ import annotations

import stat

# Group read stays allowed: a Kubernetes Secret volume reaches a non-root container only
# through the pod's fsGroup (defaultMode 0440). Group write, or anything for other users, not.
_REFUSED = stat.S_IRWXO | stat.S_IWGRP


def exposure(mode: int) -> str | None:
    """Why a file with `mode` is too open to hold keys or grants, or None when it is not."""
    if not mode & _REFUSED:
        return None
    who = []
    if mode & stat.S_IWGRP:
        who.append("its group can write it")
    others = [verb for bit, verb in ((stat.S_IROTH, "read"), (stat.S_IWOTH, "write")) if mode & bit]
    if others or mode & stat.S_IXOTH:
        what = f"can {' and '.join(others)} it" if others else "has access to it"
        who.append(f"every user of this machine {what}")
    return f"{' and '.join(who)} (mode {stat.S_IMODE(mode):04o})"
