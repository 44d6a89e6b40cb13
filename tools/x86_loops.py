#!/usr/bin/env python3
"""Instructions per block loop of the x86 kernels in a release build of `libt2p`.

Usage: tools/x86_loops.py [target/release/libt2p]

For each x86 kernel function (the `Path::run` entry points and the zmm kernels) it finds, per
count N of dot instructions (`vpdpbusd`, `vpmaddubsw`), the smallest loop (a backward branch and
its target) that holds N of them and converts scales (`vcvtph2ps`, once per block), and prints
its size, its stack accesses (spills and reloads) and whether its `vpdpbusd` are VEX
(`{vex}`) or EVEX. A gemm tile of NP column pairs has 32 * NP dot instructions per block, a
gemv 32. Used to check that a change of structure keeps the loops as they were (the module docs
of `src/kernels/x86_64/mod.rs` say why they can change).
"""
import re
import subprocess
import sys


def functions(binary):
    """(mangled, demangled) names of the x86 kernel functions."""
    syms = []
    for line in subprocess.run(['nm', binary], capture_output=True, text=True).stdout.splitlines():
        p = line.split()
        if len(p) == 3 and p[1] in 'tT' and 'x86_64' in p[2] and re.search('gemv|gemm|run', p[2]):
            syms.append(p[2])
    dem = subprocess.run(['c++filt'], input='\n'.join(syms), capture_output=True, text=True).stdout
    return sorted(zip(syms, dem.splitlines()), key=lambda t: t[1])


def instructions(binary, sym):
    out = subprocess.run(['objdump', '-d', '--no-show-raw-insn', '--disassemble=' + sym, binary],
                         capture_output=True, text=True).stdout
    found = (re.match(r'\s+([0-9a-f]+):\s+(\S.*)$', l) for l in out.splitlines())
    return [(int(m.group(1), 16), m.group(2)) for m in found if m]


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else 'target/release/libt2p'
    for sym, name in functions(binary):
        ins = instructions(binary, sym)
        best = {}
        for addr, text in ins:
            m = re.match(r'j\w+\s+([0-9a-f]+)', text)
            if not m or not ins[0][0] <= int(m.group(1), 16) <= addr:
                continue
            body = [t for a, t in ins if int(m.group(1), 16) <= a <= addr]
            dots = sum('vpdpbusd' in t or 'vpmaddubsw' in t for t in body)
            if dots and any('vcvtph2ps' in t for t in body):
                if dots not in best or len(body) < len(best[dots]):
                    best[dots] = body
        if best:
            print(re.sub(r'::h[0-9a-f]{16}$', '', name).replace('t2p::kernels::x86_64::', ''),
                  f'[{sym[-18:-1]}]')
        for dots, body in sorted(best.items()):
            spills = sum('(%rsp)' in t for t in body)
            vex = sum('{vex}' in t for t in body)
            print(f'   dots={dots:3d} insns={len(body):4d} (%rsp)={spills:3d} vex={vex}')


if __name__ == '__main__':
    main()
