"""The frame of a stamps script (scripts/hopper_stamps.py; a kernel's experiment stamps
reuse it): the copy of the kernel sources with one file patched, and the command line
(`make SRC_DIR DST_DIR`, `summary STAMPS.txt`)."""
import shutil
import sys
from pathlib import Path


class Patches(list):
    """The (old, new, count) text replacements of a stamped copy, in the order given."""

    def rep(self, old, new, count=1):
        """Adds: `old` (which must occur `count` times) replaced by `new`."""
        self.append((old, new, count))


def copy_stamped(src, dst, name, patches, tail):
    """Copies the source folder `src` to `dst` (replaced) with the file `name` patched:
    each (old, new, count) of `patches` replaces `old`, which must occur `count` times
    (else it stops and prints the text it did not find: the source moved on), then `tail`
    is appended."""
    src, dst = Path(src), Path(dst)
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    p = dst / name
    text = p.read_text()
    for old, new, count in patches:
        n = text.count(old)
        if n != count:
            sys.exit(f"expected {count} of this text in {name}, found {n}:\n{old}")
        text = text.replace(old, new)
    p.write_text(text + tail)
    print(f"stamped sources in {dst}")


def cli(make, summary, doc):
    """Runs `make(src, dst)` or `summary(path)` from the command line, else prints `doc`."""
    if len(sys.argv) == 4 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "summary":
        summary(sys.argv[2])
    else:
        sys.exit(doc)
