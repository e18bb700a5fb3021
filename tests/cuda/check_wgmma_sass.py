#!/usr/bin/env python3
"""Static check of the wgmma attention kernels' machine code (kernels/cuda/attention_sm90a.cu).

Why: ptxas of CUDA 13.0 gave the two-buffer kernels at head dim 64 (wg1, wg2) the same registers for Q's A
fragments, which the PTX keeps live across the key-tile loop, and for P, packed later in the same loop, so that
every tile after the first multiplied the previous tile's probabilities by K (docs/gpu-plan-runs.md, "Attention
forward kernels"). The GPU tests see that only as large errors; this check names the cause without a GPU.

What: for every HGMMA whose A operand is in registers, the last instruction that writes each of its four
registers before it (in address order) is found. If that writer is inside the innermost loop holding the
HGMMA, the operand is made in the same iteration: fine. Otherwise the operand is carried around the loop, and
then nothing inside the loop may write those registers, except P's packs (F2FP) for the products of P with V
(the pipelined kernel carries P of the previous tile on purpose). A loop-carried Q operand written inside the
loop is the miscompile above.

Usage: check_wgmma_sass.py OBJECT_OR_CUBIN [--cuobjdump PATH]; exit status 0 when every kernel passes, 1 when
one fails, 2 when the listing cannot be made, holds no HGMMA, or a kernel's HGMMAs sit in no loop this check
finds (a listing whose branch syntax it no longer reads would otherwise pass unchecked), 77 (a skip for ctest)
when there is no cuobjdump at all. cuobjdump runs nvdisasm, which it looks for on PATH: the folder of the
cuobjdump used is put first there (the toolkit and the nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels that
scripts/setup.sh installs both keep the two side by side).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys


def parse_functions(text):
    """(name, [(address, instruction)]) for each function of a cuobjdump -sass listing."""
    out = []
    for chunk in re.split(r'\n\s*Function : ', text)[1:]:
        name = chunk.split('\n', 1)[0].strip()
        ins = [(int(a, 16), s.strip()) for a, s in re.findall(r'/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;', chunk)]
        out.append((name, ins))
    return out


def opcode(ins):
    parts = ins.split()
    if parts and parts[0].startswith('@'):
        parts = parts[1:]
    return parts[0] if parts else ''


def written_registers(ins):
    """The general registers an instruction writes (its first operand), as far as this check needs."""
    op = opcode(ins)
    m = re.match(r'(?:@!?U?P\w+\s+)?[A-Z0-9_.]+\s+R(\d+)\b', ins)
    if not m:
        return set()
    r = int(m.group(1))
    if op.startswith('HGMMA'):
        n = int(re.match(r'HGMMA\.64x(\d+)', op).group(1))
        return set(range(r, r + n // 2))  # the accumulator: N/2 registers per thread at M 64, f32
    if op.startswith(('ST', 'RED', 'ATOM', 'R2UR', 'LDGSTS')):
        return set()  # stores and copies to shared memory name an address first, R2UR writes a uniform register
    if op.startswith('LDSM') and '.4' in op or '.128' in op:
        return set(range(r, r + 4))
    if op.startswith('LDSM') and '.2' in op or '.64' in op or 'WIDE' in op:
        return set(range(r, r + 2))
    return {r}


def wait_stub_return(ins, i):
    """Whether the branch at ins[i] returns from an out-of-line mbarrier wait: ptxas moves the retry of a
    try_wait that failed (SYNCS.PHASECHK, then a conditional branch back to it) behind the function's body and
    jumps back to where the wait was. That backward jump closes no loop of the program."""
    a, s = ins[i]
    if not re.match(r'BRA\s', s):  # unconditional only
        return False
    return any(opcode(t).startswith('SYNCS.PHASECHK') for _, t in ins[max(0, i - 3):i])


def check_function(name, ins):
    loops = []
    for i, (a, s) in enumerate(ins):
        m = re.search(r'\bBRA\s+(?:`\()?(?:!?U?P\d,\s*)?(?:`\()?0x([0-9a-f]+)', s)
        if m and int(m.group(1), 16) <= a and not wait_stub_return(ins, i):
            loops.append((int(m.group(1), 16), a))
    problems, count, looped = [], 0, 0
    for i, (a, s) in enumerate(ins):
        m = re.match(r'(?:@!?U?P\w+\s+)?HGMMA\.\S+\s+R\d+,\s+R(\d+),\s+gdesc', s)
        if not m:
            continue
        count += 1
        regs = set(range(int(m.group(1)), int(m.group(1)) + 4))
        pv = 'tnspB' in s  # O += P V (V transposed); otherwise S = Q K^T
        enclosing = [(h, t) for h, t in loops if h <= a <= t]
        if not enclosing:
            continue
        looped += 1
        head, tail = max(enclosing)  # the innermost loop: the latest head
        last = {}
        for b, t in reversed(ins[:i]):
            for r in written_registers(t) & regs:
                last.setdefault(r, b)
            if len(last) == 4:
                break
        if len(last) == 4 and min(last.values()) >= head:
            continue  # made in this iteration
        in_loop = [(b, t) for b, t in ins if head <= b <= tail and b != a and written_registers(t) & regs]
        if pv:
            bad = [(b, t) for b, t in in_loop if not opcode(t).startswith('F2FP')]
        else:
            bad = in_loop
        if bad:
            what = 'P' if pv else 'Q'
            problems.append(f'  {a:05x}: {s}\n    its A operand ({what}, R{min(regs)}..R{max(regs)}) is carried around '
                            f'the loop {head:05x}..{tail:05x} and written inside it, e.g. ' +
                            '; '.join(f'{b:05x}: {t}' for b, t in bad[:3]))
    return count, looped, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('binary')
    ap.add_argument('--cuobjdump', default=os.environ.get('CUOBJDUMP') or shutil.which('cuobjdump'))
    args = ap.parse_args()
    if not args.cuobjdump:
        print('check_wgmma_sass: SKIPPED: no cuobjdump (scripts/setup.sh installs one into .venv where nvcc is '
              'found; or pass --cuobjdump, or set CUOBJDUMP)', file=sys.stderr)
        return 77
    env = dict(os.environ)
    env['PATH'] = os.path.dirname(os.path.abspath(args.cuobjdump)) + os.pathsep + env.get('PATH', '')
    res = subprocess.run([args.cuobjdump, '-sass', args.binary], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        print(f'check_wgmma_sass: {args.cuobjdump} -sass {args.binary} failed: {res.stderr.strip()}', file=sys.stderr)
        return 2
    total, failed, unlooped = 0, 0, 0
    for name, ins in parse_functions(res.stdout):
        count, looped, problems = check_function(name, ins)
        if not count:
            continue
        total += count
        status = 'FAIL' if problems else 'ok  ' if looped else 'NONE'
        print(f'{status} {name} ({count} HGMMA with A in registers, {looped} of them inside a loop)')
        for p in problems:
            print(p)
        failed += bool(problems)
        unlooped += not looped
    if not total:
        print(f'check_wgmma_sass: no HGMMA with a register A operand in {args.binary}', file=sys.stderr)
        return 2
    if failed:
        return 1
    if unlooped:
        # Every attention kernel runs its products in a loop over key tiles: a kernel where none is found
        # means the branches were not read, and nothing of that kernel was checked.
        print(f'check_wgmma_sass: {unlooped} kernel(s) with HGMMAs in no loop found (NONE above): unchecked',
              file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
