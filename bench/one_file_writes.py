#!/usr/bin/env python3
"""What the kernel offers a sharded save (issue 25, docs/BENCHMARKS.md "Sharded saves"):
8 processes write 4 GiB into one file at disjoint 4 KiB-aligned ranges, with O_DIRECT
(`direct`, into a fallocated file), through shared maps (`mmap`), with buffered pwrite
(`pwrite`), against 8 files written with write (`files`, DCP's layout); fsync included;
timed from a barrier. Random bytes, 16 MiB a write. Nothing asserts a duration.

    python3 bench/one_file_writes.py files,direct,pwrite,mmap [DIR]
"""
import mmap, os, sys, time, multiprocessing as mp
GIB = 4
W = 8
TOTAL = GIB << 30
PER = TOTAL // W
CH = 16 << 20
path = os.path.join(sys.argv[2] if len(sys.argv) > 2 else "/work/benchdata/dio", "f")

def worker(mode, r, barrier, done):
    buf = mmap.mmap(-1, CH)
    buf.write(os.urandom(1 << 20) * (CH >> 20))
    barrier.wait()
    if mode == "files":
        fd = os.open(f"{path}.{r}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        for i in range(PER // CH):
            os.write(fd, buf)
        os.fsync(fd)
    elif mode == "direct":
        fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
        for i in range(PER // CH):
            os.pwrite(fd, buf, r * PER + i * CH)
    elif mode == "pwrite":
        fd = os.open(path, os.O_WRONLY)
        for i in range(PER // CH):
            os.pwrite(fd, buf, r * PER + i * CH)
    elif mode == "mmap":
        fd = os.open(path, os.O_RDWR)
        m = mmap.mmap(fd, PER, offset=r * PER)
        for i in range(PER // CH):
            m[i * CH:(i + 1) * CH] = buf
        m.close()
    os.close(fd)
    done.put(time.perf_counter())

def run(mode):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for f in os.listdir(os.path.dirname(path)):
        os.unlink(os.path.join(os.path.dirname(path), f))
    if mode != "files":
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        if mode in ("direct", "mmap"):
            os.posix_fallocate(fd, 0, TOTAL)
        else:
            os.ftruncate(fd, TOTAL)
        os.close(fd)
    os.sync()
    ctx = mp.get_context("fork")
    b, d = ctx.Barrier(W + 1), ctx.Queue()
    ps = [ctx.Process(target=worker, args=(mode, r, b, d)) for r in range(W)]
    for p in ps: p.start()
    b.wait(); t0 = time.perf_counter()
    ends = [d.get() for _ in ps]
    for p in ps: p.join()
    t1 = max(ends)
    if mode != "files":
        fd = os.open(path, os.O_RDONLY); os.fsync(fd); os.close(fd)
    return t1 - t0, time.perf_counter() - t0

if __name__ == "__main__":
    for rep in range(2):
        for mode in sys.argv[1].split(","):
            w, total = run(mode)
            print(f"{mode:8s} writes {w:.2f} s, with fsync {total:.2f} s", flush=True)
