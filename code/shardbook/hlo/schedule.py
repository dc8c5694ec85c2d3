"""What a scheduled HLO module runs while each asynchronous collective is in flight.

A compiled module printed with `is_scheduled=true` lists each computation's
instructions in the order they run. For every `X-start` / `X-done` pair of a
collective, `in_flight` returns the instructions the scheduler placed between
the two, and `matmuls_in_flight` the ones among them that multiply (a
`dot`/`convolution`, or a fusion whose called computation holds one).
Standard library only.
"""

import re

from .inventory import HLO_OPCODES

_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->.*\{\s*$")
_NAMED = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
# the opcode: the first `word(` after the result type (types hold no `word(`
# except layouts' T(8,128), S(1), which are single capitals)
_OPCODE = re.compile(r"\s([a-z][a-z0-9\-]*)\(")
_CALLS = re.compile(r"\bcalls=%?([\w.\-]+)")
_MATMUL_OPS = ("dot", "convolution")


def computations(hlo_text):
    """Each computation's instructions in printed order: name -> [(instruction, opcode, line)]."""
    out, current = {}, None
    for line in hlo_text.splitlines():
        m = _COMPUTATION.match(line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        if line.strip() == "}":
            current = None
            continue
        m = _NAMED.match(line)
        if current is not None and m:
            op = _OPCODE.search(" " + m.group(2))
            current.append((m.group(1), op.group(1) if op else None, line))
    return out


def _multiplies(comps):
    """Names of the computations that hold a dot or a convolution, directly or through a call."""
    direct = {name for name, instrs in comps.items() if any(op in _MATMUL_OPS for _, op, _ in instrs)}
    calls = {name: {c for _, _, line in instrs for c in _CALLS.findall(line)} for name, instrs in comps.items()}
    found, grew = set(direct), True
    while grew:
        grew = False
        for name, callees in calls.items():
            if name not in found and callees & found:
                found.add(name)
                grew = True
    return found


def in_flight(hlo_text):
    """One dict per asynchronous collective, in program order: its kind, start
    and done names, the computation that holds them, and `between`, the
    (name, opcode) of every instruction printed between the start and its done.
    Raises ValueError when the module is not scheduled or a start has no done
    in its own computation."""
    if not re.search(r"^HloModule\s.*\bis_scheduled=true", hlo_text, re.M):
        raise ValueError("schedule: the module is not scheduled (no is_scheduled=true), so its order says nothing")
    pairs = []
    for comp, instrs in computations(hlo_text).items():
        for i, (name, op, _line) in enumerate(instrs):
            if not op or not op.endswith("-start") or op.removesuffix("-start") not in HLO_OPCODES:
                continue
            done = [
                j
                for j, (_, op2, line2) in enumerate(instrs)
                if op2 == op.replace("-start", "-done") and re.search(rf"-done\(%?{re.escape(name)}[,)]", line2)
            ]
            if not done:
                raise ValueError(f"schedule: {op} {name} has no done in computation {comp}")
            j = done[0]
            pairs.append(
                {
                    "kind": HLO_OPCODES[op.removesuffix("-start")],
                    "start": name,
                    "done": instrs[j][0],
                    "computation": comp,
                    "between": [(n, o) for n, o, _ in instrs[i + 1 : j]],
                }
            )
    return pairs


def matmuls_in_flight(hlo_text):
    """For each asynchronous collective (as `in_flight` orders them), the
    names of the instructions between its start and done that multiply: a dot
    or convolution, or a fusion/call whose computation holds one."""
    comps = computations(hlo_text)
    multiplies = _multiplies(comps)
    lines = {name: line for instrs in comps.values() for name, _, line in instrs}
    out = []
    for pair in in_flight(hlo_text):
        names = []
        for name, op in pair["between"]:
            if op in _MATMUL_OPS or set(_CALLS.findall(lines[name])) & multiplies:
                names.append(name)
        out.append(names)
    return out
