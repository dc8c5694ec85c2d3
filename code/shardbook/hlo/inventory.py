"""Read partitioned HLO text and list its collectives.

For each collective: kind, dtype, operand (local) and result shapes, the
replica groups (expanded to device ids, whichever of XLA's three notations
the dump uses) and the bytes each rank sends by the ring formulas of
shardbook.collectives. Standard library only.
"""

import itertools
import math
import re

from .. import collectives
from ..units import BYTES_PER_ELEMENT

HLO_OPCODES = {
    "all-gather": "all_gather",
    "reduce-scatter": "reduce_scatter",
    "all-reduce": "all_reduce",
    "all-to-all": "all_to_all",
    "collective-permute": "collective_permute",
}
BYTES = BYTES_PER_ELEMENT  # HLO element types are among units' dtype names

_ARRAY = r"([a-z][a-z0-9]*)\[([0-9,]*)\](?:\{[^}]*\})?"
_INSTR = re.compile(rf"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*{_ARRAY}\s+([a-z\-]+)(?:-start)?\(([^)]*)\)(.*)$")
# a tuple-shaped result; its element types may carry TPU layouts with
# parentheses inside braces (f32[128,512]{1,0:T(8,128)}, u32[]{:S(2)})
_TUPLE_INSTR = re.compile(
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*\(((?:[^()]|\([^()]*\))*)\)\s+([a-z\-]+)\(([^)]*)\)(.*)$"
)
_PARAM = re.compile(rf"%?([\w.\-]+):\s*{_ARRAY}")
# a computation's header line: its name, its parameters and its result type
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\((.*)\)\s*->\s*(.*?)\s*\{\s*$", re.M)
# libtpu's fused reduce-scatter: a custom fusion of an all-reduce and the dynamic-slice that keeps
# each device's shard, emitted as one reduce-scatter (its collective_algorithm_config's emitter,
# SingleInputAllReduceScatterFusion); the called computation holds the all-reduce
_FUSED_REDUCE_SCATTER = re.compile(
    r'kind=kCustom,\s*calls=%?([\w.\-]+).*"emitter":"[A-Za-z]*AllReduceScatter[A-Za-z]*"'
)


def _shape(dims):
    return tuple(int(d) for d in dims.split(",")) if dims else ()


def _iota_groups(spec):
    # [G,S]<=[d0,d1,...]T(p0,p1,...)
    m = re.match(r"\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?", spec)
    out_shape, dims = _shape(m.group(1)), _shape(m.group(2))
    perm = _shape(m.group(3)) if m.group(3) else tuple(range(len(dims)))
    ids = _transpose(list(range(math.prod(dims))), dims, perm)
    size = out_shape[-1]
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def _transpose(flat, dims, perm):
    new_dims = [dims[p] for p in perm]
    strides = [math.prod(dims[i + 1 :]) for i in range(len(dims))]
    out = []
    for idx in itertools.product(*(range(d) for d in new_dims)):
        out.append(flat[sum(idx[k] * strides[perm[k]] for k in range(len(perm)))])
    return out


def mesh_groups(axis_sizes, group_axes):
    """Device ids grouped along `group_axes` of a row-major mesh whose axes
    (name -> size, in order) number the devices 0..N-1."""
    names = list(axis_sizes)
    dims = [axis_sizes[a] for a in names]
    other = [i for i, a in enumerate(names) if a not in group_axes]
    inner = [names.index(a) for a in group_axes]
    ids = _transpose(list(range(math.prod(dims))), dims, other + inner)
    size = math.prod(dims[i] for i in inner) if inner else 1
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def group_axes(axis_sizes, groups):
    """The mesh axes (a tuple, in mesh order) whose groups are exactly
    `groups`, or None when no set of axes gives them (a permute's pairs, or a
    grouping the mesh does not name)."""
    names = list(axis_sizes)
    wanted = sorted(sorted(g) for g in groups)
    for r in range(len(names) + 1):
        for axes in itertools.combinations(names, r):
            if sorted(sorted(g) for g in mesh_groups(axis_sizes, list(axes))) == wanted:
                return axes
    return None


def _device_ids(text):
    """The device ids of a mesh notation's `device_ids=(...)`: an iota
    `[d0,d1,...]T(p0,p1,...)` (transposed as _iota_groups does) or a list."""
    m = re.fullmatch(r"\[([0-9,]+)\](?:T\(([0-9,]+)\))?", text.strip())
    if m:
        dims = _shape(m.group(1))
        perm = _shape(m.group(2)) if m.group(2) else tuple(range(len(dims)))
        return _transpose(list(range(math.prod(dims))), dims, perm)
    if re.fullmatch(r"[0-9,\s]+", text):
        return [int(x) for x in text.split(",")]
    raise ValueError(f"replica_groups: cannot read device_ids=({text})")


def parse_replica_groups(attrs, num_partitions):
    """Replica groups of one instruction's attribute text, as lists of ids.
    Four notations: XLA's mesh axes (`mesh['axis_0'=2,...] {'axis_0'}`,
    optionally with `device_ids=(...)` numbering the mesh's positions), the
    iota form (`[G,S]<=[...]T(...)`), explicit lists (`{{0,1},{2,3}}`), and
    none or `{}` (one group of every partition). Anything else is an error,
    not a guess."""
    m = re.search(r"replica_groups=mesh\[([^\]]*)\](?:,\s*device_ids=\(([^)]*\)?)\))?\s*\{([^}]*)\}", attrs)
    if m:
        sizes = {k: int(v) for k, v in re.findall(r"'([^']+)'=(\d+)", m.group(1))}
        groups = mesh_groups(sizes, re.findall(r"'([^']+)'", m.group(3)))
        if m.group(2):
            ids = _device_ids(m.group(2))
            if len(ids) != math.prod(sizes.values()):
                raise ValueError(f"replica_groups: {len(ids)} device ids for a mesh of {math.prod(sizes.values())}")
            groups = [[ids[i] for i in g] for g in groups]
        return groups
    m = re.search(r"replica_groups=(\[[0-9,]+\]<=\[[0-9,]+\](?:T\([0-9,]+\))?)", attrs)
    if m:
        return _iota_groups(m.group(1))
    m = re.search(r"replica_groups=\{((?:\{[0-9,]*\},?)*)\}", attrs)
    if m:
        groups = [list(_shape(g)) for g in re.findall(r"\{([0-9,]*)\}", m.group(1))]
        if groups and any(groups):
            return groups
        return [list(range(num_partitions))]
    if "replica_groups=" in attrs:
        raise ValueError(
            f"replica_groups: a notation this reader does not know: {attrs[attrs.index('replica_groups=') :][:120]}"
        )
    return [list(range(num_partitions))]


def parse_pairs(attrs):
    """The [source, target] pairs of a collective-permute's attributes, [] if it names none."""
    m = re.search(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}", attrs)
    return [list(map(int, p)) for p in re.findall(r"\{(\d+),(\d+)\}", m.group(1))] if m else []


def _bytes(dtype, shape):
    if dtype not in BYTES:
        raise ValueError(f"dtype: no byte size known for HLO type {dtype!r}")
    return BYTES[dtype] * math.prod(shape)


def inventory(hlo_text):
    """Collectives of a partitioned HLO module, in program order. An
    all-reduce inside libtpu's fused reduce-scatter (a custom fusion of the
    all-reduce and the slice that keeps each device's shard, which the
    compiler emits as one reduce-scatter) is listed as the reduce-scatter
    it runs, its result the fusion's shard, with `fused` naming the fusion."""
    m = re.search(r"num_partitions=(\d+)", hlo_text)
    num_partitions = int(m.group(1)) if m else 1
    shapes = {}
    for header in _COMPUTATION.finditer(hlo_text):
        for name, dtype, dims in _PARAM.findall(header.group(2)):
            shapes[name] = (dtype, _shape(dims))
    fused_reduce_scatters = set(_FUSED_REDUCE_SCATTER.findall(hlo_text))
    found = []
    computation, computation_results = None, []
    for line in hlo_text.splitlines():
        header = _COMPUTATION.match(line)
        if header:
            computation, computation_results = (
                header.group(1),
                [dims for _, dims in re.findall(_ARRAY, header.group(3))],
            )
            continue
        if computation in fused_reduce_scatters:
            fused = _fused_reduce_scatter_entries(line, computation, computation_results, num_partitions)
            if fused:
                found += fused
                continue
        mt = _TUPLE_INSTR.match(line)
        if mt and mt.group(3).removesuffix("-start") in HLO_OPCODES:
            # a combined collective (XLA's combiner passes): one entry per operand
            name, types, op, operands, attrs = mt.groups()
            elements = re.findall(_ARRAY, types)
            names = [o.strip().lstrip("%") for o in operands.split(",") if o.strip()]
            if op.endswith("-start"):
                elements = _async_results(elements, len(names), line)
            for k, ((dtype, dims), operand) in enumerate(zip(elements, names, strict=True)):
                found.append(
                    _entry(
                        HLO_OPCODES[op.removesuffix("-start")],
                        f"{name}#{k}",
                        dtype,
                        dims,
                        operand,
                        attrs,
                        shapes,
                        num_partitions,
                    )
                )
            continue
        mi = _INSTR.match(line)
        if not mi:
            continue
        name, dtype, dims, op, operands, attrs = mi.groups()
        op = op.removesuffix("-start")  # async forms: all-gather-start(...)
        shapes[name] = (dtype, _shape(dims))
        if op not in HLO_OPCODES:
            continue
        operand_names = [o.strip().lstrip("%") for o in operands.split(",") if o.strip()]
        found.append(
            _entry(
                HLO_OPCODES[op],
                name,
                dtype,
                dims,
                operand_names[0] if operand_names else None,
                attrs,
                shapes,
                num_partitions,
            )
        )
    return found


def _fused_reduce_scatter_entries(line, computation, results, num_partitions):
    """The reduce-scatters of an all-reduce (one array, or a combined tuple
    of them) inside a fused reduce-scatter's computation: each operand's
    shape the all-reduce's own (parameter names repeat across computations,
    so none is looked up by name), each result the computation's result of
    the same position; [] for any other line."""
    mt = _TUPLE_INSTR.match(line)
    if mt and mt.group(3) == "all-reduce":
        name, types, _, _, attrs = mt.groups()
        reduced = [(dtype, _shape(dims)) for dtype, dims in re.findall(_ARRAY, types)]
    else:
        mi = _INSTR.match(line)
        if not (mi and mi.group(4) == "all-reduce"):
            return []
        name, dtype, dims, _, _, attrs = mi.groups()
        reduced = [(dtype, _shape(dims))]
    if len(reduced) != len(results):
        raise ValueError(f"inventory: {computation}: {len(reduced)} reduced arrays for {len(results)} results")
    entries = []
    for k, ((dtype, operand_shape), dims) in enumerate(zip(reduced, results, strict=True)):
        operand = {"operand": (dtype, operand_shape)}
        entry = _entry(
            "reduce_scatter", f"{name}#{k}" if mt else name, dtype, dims, "operand", attrs, operand, num_partitions
        )
        entries.append({**entry, "fused": computation})
    return entries


def _async_results(elements, n_operands, line):
    """The result types of an asynchronous collective's start, whose tuple
    holds its operands, then its results, then scalar u32/s32 context
    buffers (a TPU's collective-permute-start: (operand, result, u32[], u32[]))."""
    arrays = [e for e in elements if not (e[0] in ("u32", "s32") and e[1] == "")]
    if len(arrays) == 2 * n_operands:
        return arrays[n_operands:]
    if len(arrays) == n_operands:
        return arrays
    raise ValueError(f"inventory: cannot tell the results of an asynchronous collective: {line.strip()[:160]}")


def async_pairs(hlo_text):
    """The asynchronous collectives of an HLO module: one (kind, start
    name, done name) per `X-start` whose `X-done` consumes it, in program
    order; a start without its done is an error."""
    starts = re.findall(r"^\s*%?([\w.\-]+)\s*=.*?\s([a-z\-]+)-start\(", hlo_text, re.M)
    dones = dict(
        (operand, name)
        for name, operand in re.findall(
            r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*?\s[a-z\-]+-done\(%?([\w.\-]+)", hlo_text, re.M
        )
    )
    pairs = []
    for name, op in starts:
        if op not in HLO_OPCODES:
            continue
        if name not in dones:
            raise ValueError(f"inventory: {op}-start {name} has no {op}-done")
        pairs.append((HLO_OPCODES[op], name, dones[name]))
    return pairs


def _entry(kind, name, dtype, dims, operand, attrs, shapes, num_partitions):
    _, op_shape = shapes.get(operand, (dtype, None))
    entry = {
        "kind": kind,
        "name": name,
        "dtype": dtype,
        "operand_shape": list(op_shape) if op_shape is not None else None,
        "result_shape": list(_shape(dims)),
    }
    op_name = re.search(r'op_name="([^"]*)"', attrs)
    if op_name:  # what JAX operation it comes from (not part of the summary)
        entry["op_name"] = op_name.group(1)
    if kind == "collective_permute":
        entry["source_target_pairs"] = parse_pairs(attrs)
        entry["group_size"] = len(entry["source_target_pairs"])
        entry["bytes_sent_per_rank"] = _bytes(dtype, _shape(dims))
    else:
        groups = parse_replica_groups(attrs, num_partitions)
        n = len(groups[0])
        entry["group_size"] = n
        entry["replica_groups"] = groups
        entry["bytes_sent_per_rank"] = ring_bytes(kind, dtype, op_shape, _shape(dims), n)
    return entry


def ring_bytes(kind, dtype, operand_shape, result_shape, n):
    """Bytes one rank sends in a ring collective of `kind` over `n` ranks."""
    if kind == "all_gather":
        return collectives.ring_bytes_sent_per_rank(_bytes(dtype, result_shape), n)
    if kind == "reduce_scatter":
        if operand_shape is None:  # the operand is n results
            return collectives.ring_bytes_sent_per_rank(n * _bytes(dtype, result_shape), n)
        return collectives.ring_bytes_sent_per_rank(_bytes(dtype, operand_shape), n)
    if kind == "all_reduce":
        return 2 * collectives.ring_bytes_sent_per_rank(_bytes(dtype, result_shape), n)
    # all_to_all: the operand and the result have the same size; a compiled
    # module may define the operand where this parser does not look (a fusion)
    return _bytes(dtype, operand_shape if operand_shape is not None else result_shape) * (n - 1) / n


def summary(entries):
    """The comparable part of an inventory: what must not drift."""
    keys = (
        "kind",
        "dtype",
        "operand_shape",
        "result_shape",
        "group_size",
        "replica_groups",
        "source_target_pairs",
        "bytes_sent_per_rank",
    )
    return [{k: e[k] for k in keys if k in e} for e in entries]
