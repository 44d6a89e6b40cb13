#!/usr/bin/env python3
"""The loop-cutting and table half of tools/arm-throughput.sh (see there for what it models).

Reads an `llvm-objdump -d -C --no-show-raw-insn` listing of the aarch64 library, finds each
kernel's symbol (the `#[inline(never)]` kernel fns, by their demangled path), takes its
per-block loop (the range between a backward branch and its target: the innermost loop with
multiply-adds and the float step, see `hot_loop`), and runs llvm-mca on it per CPU model.

Work per loop iteration is counted from the multiply-add instructions themselves (SDOT = 16
int8 multiply-adds, SMMLA = 32, SMLAL/SMLAL2 on bytes = 8), so the table does not depend on how
far the compiler unrolled: "per 512 MACs" is per 128 weights x 4 rows of one column (for the
gemm tiles, per block of one of the tile's four columns, zero-padded ones included).
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

def _kernels():
    """(path, kernel, activations, symbol under t2p::kernels::aarch64::, layout) per kernel.

    The NEON and dotprod paths have the same five kernels, named `<op>_<path>`. A `|` lists a
    fallback: LLVM has been seen to fold a NEON kernel fn into its entry despite
    `#[inline(never)]` (NEON is the aarch64 baseline, so its `#[target_feature]` changes
    nothing), and then the entry holds the loop.
    """
    rows = []
    for path in ("neon", "dotprod"):
        for acts in ("q8_K", "q8_0"):
            for kernel in ("gemv", "gemm"):
                op = kernel if acts == "q8_K" else f"{kernel}_q8_0"
                symbol = f"{path}::{op}_{path}"
                if path == "neon" and acts == "q8_0":
                    symbol += f"|{path}::{op}"
                rows.append((path, kernel, acts, symbol, "T2P"))
        rows.append((path, "vec_dot", "q8_K", f"{path}::vec_dot_stock_{path}", "stock"))
    rows.append(("i8mm", "gemm", "q8_K", "i8mm::gemm_i8mm", "T2P"))
    rows.append(("i8mm", "gemm", "q8_0", "i8mm::gemm_q8_0_i8mm", "T2P"))
    return rows


KERNELS = _kernels()

# CPU models: (llvm-mca -mcpu name, what it is, extensions the real core has). A path is
# modelled only on cores that have its instructions.
CPUS = {
    "oryon-1": ("Qualcomm Oryon (Snapdragon X)", {"dotprod", "i8mm"}),
    "neoverse-v2": ("Neoverse V2 (Grace, Graviton4)", {"dotprod", "i8mm"}),
    "neoverse-v1": ("Neoverse V1 (Graviton3)", {"dotprod", "i8mm"}),
    "neoverse-n2": ("Neoverse N2 (Cortex-A710 class)", {"dotprod", "i8mm"}),
    "neoverse-n1": ("Neoverse N1 (Graviton2, Ampere Altra; Cortex-A76 class)", {"dotprod"}),
    "cortex-a510": ("Cortex-A510 (in-order little core)", {"dotprod", "i8mm"}),
    "cortex-a55": ("Cortex-A55 (in-order little core)", {"dotprod"}),
    "cortex-a53": ("Cortex-A53 (in-order, Armv8.0)", set()),
}
DEFAULT_CPUS = ["oryon-1", "neoverse-v2", "neoverse-v1", "neoverse-n2", "neoverse-n1",
                "cortex-a510", "cortex-a55", "cortex-a53"]
NEEDS = {"neon": set(), "dotprod": {"dotprod"}, "i8mm": {"dotprod", "i8mm"}}

LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
HEAD = re.compile(r"^([0-9a-f]+) <(.*)>:$")
# A code address in an operand: objdump names it (`0x1234 <sym+0x10>`); immediates (`#0x20`)
# have no name.
TARGET = re.compile(r"(?<!#)(?<!#-)\b0x([0-9a-f]+) <[^>]*>")
BRANCHES = {"b", "cbz", "cbnz", "tbz", "tbnz"}


def macs(mnemonic, operands):
    """int8 multiply-adds one instruction does (0 for everything else)."""
    if mnemonic == "sdot":
        return 16
    if mnemonic == "smmla":
        return 32
    # smull/smull2 are the first multiply-add of a chain whose start value is zero.
    if mnemonic in ("smlal", "smlal2", "smull", "smull2") and ".8h" in operands:
        return 8
    return 0


def parse(listing):
    """{demangled name: [(address, mnemonic, operands)]}"""
    funcs, cur = {}, None
    for line in listing.splitlines():
        h = HEAD.match(line)
        if h:
            cur = funcs.setdefault(h.group(2), [])
            continue
        m = LINE.match(line)
        if m and cur is not None:
            ops = m.group(3).split("//")[0].strip()
            cur.append((int(m.group(1), 16), m.group(2), ops))
    return funcs


def find(funcs, syms):
    """The first of the `|`-separated symbols present (exactly once) in the disassembly."""
    for sym in syms.split("|"):
        want = "t2p::kernels::aarch64::" + sym
        hits = [n for n in funcs if n == want or re.fullmatch(re.escape(want) + r"::h[0-9a-f]{16}", n)]
        if len(hits) == 1:
            return hits[0]
    sys.exit(f"arm_throughput: none of {syms} found once in the disassembly")


def hot_loop(body):
    """The kernel's per-block loop in `body`: of the innermost loops (backward branch .. its
    target) that hold multiply-adds and the block's float step (an `fadd`: every kernel adds
    each block's scaled sum into its float accumulators, so a loop over the words of one block
    does not qualify), the one doing the most multiply-adds per iteration (a kernel with a
    narrower variant for a last, partial tile has two such loops)."""
    loops = []
    for i, (addr, mn, ops) in enumerate(body):
        if mn.split(".")[0] not in BRANCHES:
            continue
        t = TARGET.search(ops)
        if not t or int(t.group(1), 16) > addr:
            continue
        start = next((j for j, (a, _, _) in enumerate(body) if a == int(t.group(1), 16)), None)
        if start is None:
            continue
        loop = body[start:i + 1]
        if any(macs(m, o) for _, m, o in loop) and any(m == "fadd" for _, m, _ in loop):
            loops.append((start, i))
    inner = [(s, e) for s, e in loops
             if not any((s2, e2) != (s, e) and s <= s2 and e2 <= e for s2, e2 in loops)]
    if not inner:
        return None
    s, e = max(inner, key=lambda l: sum(macs(m, o) for _, m, o in body[l[0]:l[1] + 1]))
    return body[s:e + 1]


def callees(funcs, body):
    """t2p functions called from `body` (a kernel fn whose loop was not inlined into it)."""
    out = []
    for _, mn, ops in body:
        if mn == "bl":
            m = re.search(r"<(t2p::[^>+]*)>", ops)
            if m and m.group(1) in funcs:
                out.append(m.group(1))
    return out


def kernel_loop(funcs, sym):
    name = find(funcs, sym)
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        loop = hot_loop(funcs[n])
        if loop:
            return n, loop
        todo.extend(callees(funcs, funcs[n]))
    sys.exit(f"arm_throughput: no multiply-add loop found in {name}")


def to_asm(loop):
    """The loop as llvm-mca input: branch and literal targets become labels."""
    top = loop[0][0]
    lines = [".text", ".Ltop:"]
    for _, mn, ops in loop:
        def label(m):
            return ".Ltop" if int(m.group(1), 16) == top else ".Lout"
        lines.append(f"\t{mn}\t{TARGET.sub(label, ops)}")
    lines.append(".Lout:")
    return "\n".join(lines) + "\n"


def classify(mn, ops):
    if macs(mn, ops):
        return "mac"
    if mn.startswith("ld") or mn.startswith("prfm"):
        return "load"
    if mn.startswith("st"):
        return "store"
    if mn in ("dup", "mov", "ext", "zip1", "zip2", "uzp1", "uzp2", "ins", "trn1", "trn2") and "v" in ops:
        return "dup/permute"
    # Byte-lane integer ops are the code unpacking (T2P: and, ushr; stock: tbl, ushl, and, and
    # the `- 1`, which LLVM emits as an add of -1).
    if mn in ("and", "ushr", "ushl", "sshl", "tbl", "sub", "add", "shl", "bic", "orr", "sri", "sli") and (
        ".16b" in ops or ".8b" in ops
    ):
        return "unpack"
    if mn.startswith("f") or mn in ("scvtf", "ucvtf"):
        return "float"
    if mn.split(".")[0] in BRANCHES or re.match(r"^(add|sub|subs|adds|cmp|cmn|madd|mul|lsl|lsr|csel|ccmp)$", mn) and "v" not in ops.split(",")[0]:
        return "scalar"
    return "vector other"


# Stand-ins for instructions a model has no scheduling entry for (LLVM 19's oryon-1 lacks the
# vector int->float conversion, the vector shift by register and scalar single-precision
# fmul/fadd): an instruction of the same pipe class on the same registers, so dependencies
# stay. Applied only for a model that rejects the loop, and reported under its table.
PROXIES = [
    (r"^\tscvtf\t(v\d+)\.(4s|2s), (v\d+)\.\2$", r"\tfmul\t\1.\2, \3.\2, \3.\2",
     "vector scvtf as fmul"),
    (r"^\tscvtf\ts(\d+), s(\d+)$", r"\tfmul\tv\1.2s, v\2.2s, v\2.2s", "scalar scvtf as fmul"),
    (r"^\tushl\t(v\d+)\.16b, (v\d+)\.16b, (v\d+)\.16b$", r"\tadd\t\1.16b, \2.16b, \3.16b",
     "vector ushl as add"),
    (r"^\t(fmul|fadd|fsub)\ts(\d+), s(\d+), s(\d+)$", r"\t\1\tv\2.2s, v\3.2s, v\4.2s",
     "scalar fmul/fadd as their 2s vector forms"),
]


def run_mca(tool, cpu, path):
    return subprocess.run(
        [tool, "-mtriple=aarch64", f"-mcpu={cpu}", "-mattr=+dotprod,+i8mm,+fullfp16",
         "-iterations=400", str(path)],
        capture_output=True, text=True,
    )


def mca(tool, cpu, asm, work, tag, used):
    """Cycles per loop iteration, or None; adds the stand-ins it needed to `used`."""
    path = Path(work) / f"{tag}.s"
    path.write_text(asm)
    r = run_mca(tool, cpu, path)
    if r.returncode != 0 and "unsupported instruction" in r.stderr:
        for pat, rep, what in PROXIES:
            asm, n = re.subn(pat, rep, asm, flags=re.M)
            if n:
                used.add(what)
        path.write_text(asm)
        r = run_mca(tool, cpu, path)
    if r.returncode != 0:
        return None
    get = lambda k: float(re.search(rf"^{k}:\s+([0-9.]+)", r.stdout, re.M).group(1))
    return get("Total Cycles") / get("Iterations")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mca", required=True)
    ap.add_argument("--dis", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--clock", type=float, default=3.0, help="GHz for the GB/s column")
    ap.add_argument("--cpus", default=",".join(DEFAULT_CPUS))
    ap.add_argument("--dump", help="write each cut loop to this folder")
    a = ap.parse_args()
    funcs = parse(Path(a.dis).read_text())

    loops = []
    for path, kern, act, sym, layout in KERNELS:
        name, loop = kernel_loop(funcs, sym)
        m = sum(macs(mn, o) for _, mn, o in loop)
        mix = {}
        for _, mn, o in loop:
            c = classify(mn, o)
            mix[c] = mix.get(c, 0) + 1
        asm = to_asm(loop)
        if a.dump:
            Path(a.dump).mkdir(parents=True, exist_ok=True)
            (Path(a.dump) / f"{path}-{kern}-{act}-{layout}.s").write_text(asm)
        # Columns one weight meets per load: the tile width (the i8mm q8_0 tile is 8 wide).
        cols = 1 if kern != "gemm" else (8 if (path, act) == ("i8mm", "q8_0") else 4)
        loops.append(dict(path=path, kern=kern, act=act, layout=layout, name=name,
                          n=len(loop), macs=m, mix=mix, asm=asm, cols=cols))

    print()
    print("Loops cut (instructions per 64 MACs by class; MAC = one int8 multiply-add):")
    classes = ["mac", "unpack", "load", "dup/permute", "float", "vector other", "scalar", "store"]
    print(f"  {'path':8} {'kernel':8} {'act':5} {'layout':6} {'insns/iter':>10} {'MACs/iter':>9} "
          + " ".join(f"{c:>12}" for c in classes))
    for l in loops:
        per = 64 / l["macs"]
        print(f"  {l['path']:8} {l['kern']:8} {l['act']:5} {l['layout']:6} {l['n']:>10} {l['macs']:>9} "
              + " ".join(f"{l['mix'].get(c, 0) * per:>12.2f}" for c in classes))

    # Weight bytes per MAC: a T2P block is 136 bytes for 4 x 128 weights, a pq2_0 block 34 for
    # 128: both 0.265625 bytes per weight. A gemm tile reads its weights once per four columns.
    wbytes = 136 / 512
    print()
    print(f"Per CPU model (llvm-mca, {a.clock} GHz stated clock, L1-resident loops):")
    print("  cyc/512 = cycles per 128 weights x 4 rows (512 MACs) of one column;")
    print("  insn/64 = instructions per 64 MACs; GB/s = weight bytes per second per core")
    print("  (gemv/vec_dot: every weight read once per column; gemm: once per tile, 4 columns wide,")
    print("  8 for the i8mm q8_0 tile).")
    for cpu in a.cpus.split(","):
        desc, feats = CPUS.get(cpu, (cpu, {"dotprod", "i8mm"}))
        print()
        print(f"== {cpu}: {desc}")
        print(f"  {'path':8} {'kernel':8} {'act':5} {'layout':6} {'cyc/iter':>9} {'cyc/512':>8} "
              f"{'insn/64':>8} {'GMAC/s':>8} {'GB/s':>7}")
        res, used = {}, set()
        for l in loops:
            if not NEEDS[l["path"]] <= feats:
                continue
            c = mca(a.mca, cpu, l["asm"], a.work, f"{cpu}-{l['path']}-{l['kern']}-{l['act']}-{l['layout']}", used)
            if c is None:
                print(f"  {l['path']:8} {l['kern']:8} {l['act']:5} {l['layout']:6} {'mca failed':>9}")
                continue
            c512 = c * 512 / l["macs"]
            gmac = l["macs"] / c * a.clock
            gbs = gmac * wbytes / l["cols"]
            res[(l["path"], l["kern"], l["act"])] = c512
            print(f"  {l['path']:8} {l['kern']:8} {l['act']:5} {l['layout']:6} {c:>9.1f} {c512:>8.2f} "
                  f"{l['n'] * 64 / l['macs']:>8.2f} {gmac:>8.1f} {gbs:>7.1f}")
        for p in ("neon", "dotprod", "i8mm"):
            g8k, g80 = res.get((p, "gemm", "q8_K")), res.get((p, "gemm", "q8_0"))
            v8k, stock = res.get((p, "gemv", "q8_K")), res.get((p, "vec_dot", "q8_K"))
            notes = []
            if g8k and g80:
                notes.append(f"q8_0 gemm / q8_K gemm = {g80 / g8k:.2f}x")
            if v8k and stock:
                notes.append(f"stock vec_dot / T2P gemv (q8_K) = {stock / v8k:.2f}x")
            if notes:
                print(f"  {p}: " + "; ".join(notes))
        if used:
            print(f"  (no scheduling entry in this model, modelled by a stand-in: {', '.join(sorted(used))})")


if __name__ == "__main__":
    main()
