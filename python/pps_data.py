#!/usr/bin/env python3
"""pps_data.py: converts training tokens between llm.c token files and Megatron-LM
indexed datasets (the two token formats `--data` reads; docs/models.md, "Real data and
checkpoints"), in pure Python 3 (struct, array; no numpy), streaming: at most CHUNK
tokens in memory, whatever the file's size (the index's sizes and pointers excepted:
12 bytes a sequence).

  python3 python/pps_data.py to-indexed FILE.bin PREFIX [--dtype uint16|int32|...]
                                                        [--eot TOKEN]
      An llm.c token file (256 int32 header: magic 20240520, version 1, count; uint16
      tokens) -> PREFIX.idx + PREFIX.bin, one document a sequence. Without --eot the
      file is one document; with --eot TOKEN each document ends after a TOKEN (llm.c's
      GPT-2 shards put 50256 before each document: the first one then holds just it).
      --dtype: the tokens' type in PREFIX.bin (default uint16).

  python3 python/pps_data.py to-llmc PREFIX FILE.bin
      A Megatron-LM indexed dataset -> an llm.c token file of its sequences in index
      order (the stream `--data PREFIX` trains on). Refused (exit 2): a token outside
      0..65535 (llm.c's uint16), more than 2^31 - 1 tokens (its int32 count).

Bad input (not a token file, a malformed index: magic, version, dtype, sizes or
pointers past the .bin) is one line on stderr and exit 2; outputs are written to
temporary files beside the targets and renamed only when complete.
"""
import argparse
import array
import os
import struct
import sys
import tempfile

MAGIC, HEADER = 20240520, 256
IDX_MAGIC = b"MMIDIDX\x00\x00"
# Megatron-LM's dtype codes (megatron/core/datasets/indexed_dataset.py, DType)
DTYPES = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 8: "H"}
NAMES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "uint16": 8}
CHUNK = 1 << 22


class Bad(Exception):
    pass


def tokens_of(fmt, raw):
    a = array.array(fmt)
    a.frombytes(raw)
    if sys.byteorder != "little":
        a.byteswap()
    return a


def bytes_of(fmt, values):
    a = array.array(fmt, values)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


class Out:
    """A file written to a temporary name beside path, renamed over it by done()."""

    def __init__(self, path):
        d = os.path.dirname(os.path.abspath(path))
        fd, self.tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=d)
        self.f, self.path = os.fdopen(fd, "wb"), path

    def done(self):
        self.f.close()
        os.replace(self.tmp, self.path)

    def abort(self):
        self.f.close()
        os.unlink(self.tmp)


def to_indexed(src, prefix, dtype, eot):
    code = NAMES[dtype]
    fmt = DTYPES[code]
    lo, hi = {"B": (0, 255), "b": (-128, 127), "h": (-32768, 32767), "H": (0, 65535)}.get(fmt, (0, 65535))
    with open(src, "rb") as f:
        hdr = f.read(4 * HEADER)
        if len(hdr) < 4 * HEADER:
            raise Bad("%s: truncated: %d bytes, shorter than the %d-byte header of a token file" % (src, len(hdr), 4 * HEADER))
        magic, version, count = struct.unpack("<3i", hdr[:12])
        if magic != MAGIC or version != 1 or count < 0:
            raise Bad("%s: not an llm.c token file (magic %d, version %d; expected %d, 1)" % (src, magic, version, MAGIC))
        sizes, cur = [], 0
        bins = Out(prefix + ".bin")
        try:
            left = count
            while left:
                raw = f.read(2 * min(left, CHUNK))
                if not raw or len(raw) % 2:
                    raise Bad("%s: truncated: the header promises %d tokens, the file holds %d" % (src, count, count - left + len(raw) // 2))
                toks = tokens_of("H", raw)
                left -= len(toks)
                if fmt in "Bbh" and (min(toks) < lo or max(toks) > hi):
                    raise Bad("%s: a token outside %d..%d does not fit --dtype %s" % (src, lo, hi, dtype))
                bins.f.write(bytes_of(fmt, toks))
                if eot is None:
                    cur += len(toks)
                    continue
                start = 0
                for i, t in enumerate(toks):
                    if t == eot:
                        sizes.append(cur + i + 1 - start)
                        cur, start = 0, i + 1
                cur += len(toks) - start
            if cur or not sizes:
                sizes.append(cur)
        except BaseException:
            bins.abort()
            raise
    itemsize = struct.calcsize(fmt)
    idx = Out(prefix + ".idx")
    idx.f.write(IDX_MAGIC + struct.pack("<QBQQ", 1, code, len(sizes), len(sizes) + 1))
    idx.f.write(bytes_of("i", sizes))
    ptr, ptrs = 0, array.array("q")
    for n in sizes:
        ptrs.append(ptr)
        ptr += n * itemsize
    idx.f.write(bytes_of("q", ptrs))
    idx.f.write(bytes_of("q", range(len(sizes) + 1)))
    bins.done()
    idx.done()
    return count, len(sizes)


def to_llmc(prefix, dst):
    ip, bp = prefix + ".idx", prefix + ".bin"
    with open(ip, "rb") as f:
        head = f.read(34)
        if len(head) < 34 or head[:9] != IDX_MAGIC:
            raise Bad("%s: not a Megatron-LM index" % ip)
        version, code, S, D = struct.unpack("<QBQQ", head[9:])
        if version != 1:
            raise Bad("%s: version %d is not supported (expected 1)" % (ip, version))
        if code not in DTYPES:
            raise Bad("%s: dtype code %d is not an integer type (%s)" % (ip, code, ", ".join(
                "%d %s" % (c, n) for n, c in sorted(NAMES.items(), key=lambda x: x[1]))))
        sizes_raw, ptrs_raw = f.read(4 * S), f.read(8 * S)
        if len(sizes_raw) < 4 * S or len(ptrs_raw) < 8 * S:
            raise Bad("%s: truncated: its header promises %d sequences" % (ip, S))
    sizes, ptrs = tokens_of("i", sizes_raw), tokens_of("q", ptrs_raw)
    fmt = DTYPES[code]
    w = struct.calcsize(fmt)
    total = sum(sizes)
    if total > 2 ** 31 - 1:
        raise Bad("%s: %d tokens, more than an llm.c file's int32 count holds" % (prefix, total))
    binsize = os.path.getsize(bp)
    out = Out(dst)
    try:
        out.f.write(struct.pack("<256i", MAGIC, 1, total, *([0] * 253)))
        with open(bp, "rb") as b:
            for i, (n, p) in enumerate(zip(sizes, ptrs)):
                if n < 0 or p < 0 or p + n * w > binsize:
                    raise Bad("%s: sequence %d (%d tokens at byte %d) is not within '%s' (%d bytes)" % (ip, i, n, p, bp, binsize))
                b.seek(p)
                while n:
                    k = min(n, CHUNK)
                    toks = tokens_of(fmt, b.read(k * w))
                    if min(toks) < 0 or max(toks) > 65535:
                        raise Bad("%s: sequence %d holds a token outside 0..65535 (llm.c's uint16)" % (bp, i))
                    out.f.write(bytes_of("H", toks))
                    n -= k
    except BaseException:
        out.abort()
        raise
    out.done()
    return total, S


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("to-indexed", help="an llm.c token file -> PREFIX.idx + PREFIX.bin")
    a.add_argument("src")
    a.add_argument("prefix")
    a.add_argument("--dtype", choices=sorted(NAMES), default="uint16")
    a.add_argument("--eot", type=int, default=None, help="a document ends after each such token")
    b = sub.add_parser("to-llmc", help="PREFIX.idx + PREFIX.bin -> an llm.c token file")
    b.add_argument("prefix")
    b.add_argument("dst")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "to-indexed":
            n, s = to_indexed(args.src, args.prefix, args.dtype, args.eot)
            print("%s: %d tokens, %d sequences -> %s.idx, %s.bin (%s)" % (args.src, n, s, args.prefix, args.prefix, args.dtype))
        else:
            n, s = to_llmc(args.prefix, args.dst)
            print("%s: %d sequences, %d tokens -> %s" % (args.prefix, s, n, args.dst))
    except (Bad, OSError) as e:
        print("pps_data.py: error: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
