#!/usr/bin/env python3
"""Random mutations of a real archive through the CLI: each must give exit 0, 1 or 2, one
`modelzip: ` error line on exit 2, no panic, and finish within 3 s.

    cargo build --release
    python3 scripts/mutate-cli.py [--seed 2] [--runs 1500] [--exe target/release/modelzip]

Figures are recorded in docs/RELIABILITY.md.
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests/fixtures/paddle")
COMMANDS = (["tags"], ["verify"], ["show"], ["cat", "fc_0.w_0", "--tag", "fp32"],
            ["extract", "--out", "xo", "--force", "--tag", "fp32"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1500)
    ap.add_argument("--exe", default=os.path.join(ROOT, "target/release/modelzip"))
    a = ap.parse_args()
    work = tempfile.mkdtemp()
    os.chdir(work)
    versions = sorted(os.listdir(FIX))
    subprocess.run([a.exe, "pack", "base.zip", os.path.join(FIX, versions[-1], "mlp_persistables"),
                    "--tag", "fp32", "--graph", os.path.join(FIX, versions[-1], "mlp.pdmodel"),
                    "-q"], check=True)
    subprocess.run([a.exe, "pack", "base.zip", os.path.join(FIX, versions[0], "mlp_persistables"),
                    "--tag", "step-2", "-q"], check=True)
    base = open("base.zip", "rb").read()
    rng = random.Random(a.seed)
    bad = 0
    for i in range(a.runs):
        b = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            r, p = rng.random(), rng.randrange(len(b))
            if r < 0.5:
                b[p] = rng.randrange(256)
            elif r < 0.7:
                b[p:p + 4] = rng.choice([b"\xff\xff\xff\xff", b"\0\0\0\0", b"\0\0\0\x80",
                                         b"\xfe\xff\xff\x7f"])
            elif r < 0.85:
                del b[p:p + rng.randint(1, 50)]
            else:
                b[p:p] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 20)))
        with open("m.zip", "wb") as f:
            f.write(b)
        for cmd in COMMANDS:
            t = time.time()
            p = subprocess.run([a.exe, cmd[0], "m.zip"] + cmd[1:], capture_output=True)
            dt = time.time() - t
            err = p.stderr.decode(errors="replace")
            one_line = len(err.strip().splitlines()) == 1 and err.startswith("modelzip: ")
            if (p.returncode not in (0, 1, 2) or "panicked" in err or dt > 3
                    or (p.returncode == 2 and not one_line)):
                bad += 1
                keep = os.path.join(work, f"bad{bad}.zip")
                with open(keep, "wb") as f:
                    f.write(b)
                print(f"BAD run {i} {cmd}: exit {p.returncode}, {dt:.2f} s: {err[:200]} -> {keep}")
    print(f"{a.runs} mutations x {len(COMMANDS)} commands: {bad} bad")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
