"""Progress bars for long work (kernel builds, long simulations), one place for all of pypto.

A bar appears only when stderr is a terminal, only after ``delay`` seconds (short work prints nothing), and
never when ``PYPTO_PROGRESS=0``. ``PYPTO_PROGRESS=1`` forces bars even without a terminal (for logs).

    with progress(total=len(units), desc="building kernels", unit="kernel") as bar:
        for u in units:
            build(u)
            bar.update(1)
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager

DEFAULT_DELAY_S = 2.0


def enabled() -> bool:
    """Whether progress bars are shown: PYPTO_PROGRESS=0/1 decides, else whether stderr is a terminal."""
    flag = os.environ.get("PYPTO_PROGRESS", "").strip()
    if flag in ("0", "1"):
        return flag == "1"
    return sys.stderr.isatty()


class _Silent:
    """What ``progress`` yields when bars are off: no tqdm at all (its first bar, even disabled, makes
    a multiprocessing lock: ~7 ms of every process's first simulation)."""

    def update(self, n=1):
        pass

    def set_postfix_str(self, s="", refresh=True):
        pass


@contextmanager
def progress(total=None, desc: str = "", unit: str = "it", delay: float = DEFAULT_DELAY_S):
    """A tqdm bar (or a silent stand-in with the same ``update``/``set_postfix_str`` methods)."""
    if not enabled():
        yield _Silent()
        return
    from tqdm import tqdm
    bar = tqdm(total=total, desc=desc, unit=unit, delay=delay, leave=False, file=sys.stderr, dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()
