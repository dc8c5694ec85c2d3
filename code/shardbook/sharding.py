"""Global shapes, PartitionSpecs and device-local shapes, without JAX.

A mesh is a mapping from axis name to size, e.g. {"fsdp": 2, "ep": 4}. A spec
has one entry per array dimension: None (replicated along that dimension), an
axis name, or a tuple of axis names whose sizes multiply. Axes the spec does
not use replicate the array. Ref: jax-sharding-docs, scale-your-model-amd.
"""

import math

from . import _validate


def _check_mesh(mesh):
    if not isinstance(mesh, dict) or not mesh:
        raise ValueError(f"mesh: must be a non-empty dict of axis name -> size, got {mesh!r}")
    for axis, size in mesh.items():
        _validate.count(f"mesh[{axis!r}]", size)
    return mesh


def _axes_of(entry):
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    if isinstance(entry, (tuple, list)) and all(isinstance(a, str) for a in entry):
        return tuple(entry)
    raise ValueError(f"spec: each entry must be None, an axis name or a tuple of names, got {entry!r}")


def _check_spec(spec, mesh=None):
    """A spec is a tuple (or list) with one entry per dimension; a bare
    string would be read letter by letter, so it is refused. Every axis it
    names must be in the mesh."""
    if isinstance(spec, str) or not isinstance(spec, (tuple, list)):
        raise ValueError(
            f"spec: must be a tuple with one entry per dimension (None, an axis name or a tuple of names), got {spec!r}"
        )
    spec = tuple(spec)
    if mesh is not None:
        for i, entry in enumerate(spec):
            for axis in _axes_of(entry):
                if axis not in mesh:
                    raise ValueError(
                        f"spec: axis {axis!r} (dimension {i}) is not in the mesh; mesh axes: {', '.join(mesh)}"
                    )
    return spec


def shard_counts(global_shape, spec, mesh):
    """For each dimension, how many ways the spec splits it (q_i)."""
    _check_mesh(mesh)
    shape = tuple(global_shape)
    for i, d in enumerate(shape):
        _validate.count(f"global_shape[{i}]", d)
    spec = _check_spec(spec)
    if len(spec) != len(shape):
        raise ValueError(
            f"spec: has {len(spec)} entries but global_shape has {len(shape)} dimensions; give one entry per dimension"
        )
    used = {}
    counts = []
    for i, entry in enumerate(spec):
        q = 1
        for axis in _axes_of(entry):
            if axis not in mesh:
                raise ValueError(
                    f"spec: axis {axis!r} (dimension {i}) is not in the mesh; mesh axes: {', '.join(mesh)}"
                )
            if axis in used:
                raise ValueError(
                    f"spec: mesh axis {axis!r} splits dimension {used[axis]} and dimension {i}; "
                    "an axis can partition only one dimension of an array"
                )
            used[axis] = i
            q *= mesh[axis]
        if shape[i] % q:
            raise ValueError(
                f"spec: dimension {i} of size {shape[i]} is not divisible by {q} (the product of its axes {_axes_of(entry)})"
            )
        counts.append(q)
    return tuple(counts)


def local_shape(global_shape, spec, mesh):
    """Device-local shape: each dimension d_i divided by q_i, the product of
    the sizes of the mesh axes that split it."""
    counts = shard_counts(global_shape, spec, mesh)
    return tuple(d // q for d, q in zip(global_shape, counts, strict=True))


def local_bytes(global_shape, spec, mesh, bytes_per_element):
    """Bytes one device stores: s * prod(d_i / q_i)."""
    _validate.positive("bytes_per_element", bytes_per_element)
    return bytes_per_element * math.prod(local_shape(global_shape, spec, mesh))


def n_devices(mesh):
    """Devices in a mesh: the product of its axis sizes."""
    return math.prod(_check_mesh(mesh).values())


def replication_factor(spec, mesh):
    """How many devices hold each shard: the product of the mesh axes the spec
    does not use."""
    _check_mesh(mesh)
    spec = _check_spec(spec, mesh)
    used = {a for entry in spec for a in _axes_of(entry)}
    return math.prod(size for axis, size in mesh.items() if axis not in used)


def matmul_communication(lhs_spec, rhs_spec, out_spec=None):
    """What C[I,K] = A[I,J] · B[J,K] needs, given the specs of A (I, J) and
    B (J, K) over mesh axes (None = replicated). Returns a list of
    (step, axis) pairs and the spec of C:

    - J split the same way on both: each device holds partial sums; an
      all-reduce (or a reduce-scatter, to keep C sharded) completes them.
    - J split on one operand only: that operand is all-gathered along J.
    - I and K split by the same axis: C would need one axis on two
      dimensions, so one operand is all-gathered first, and the layout C
      must have decides which: `out_spec` (the pair C must end up with, a
      parameter's layout for a weight gradient) keeping the axis on K means
      A is gathered along I; keeping it on I, or no `out_spec`, means B is
      gathered along K. Gathering the other operand would leave C split on
      the wrong dimension, which only a further all-to-all could fix.
    - otherwise no communication: C is split as I and K are.

    Ref: scaling-book-sharding, distributed-training-notes."""
    for name, spec in (("lhs_spec", lhs_spec), ("rhs_spec", rhs_spec), ("out_spec", out_spec)):
        if name == "out_spec" and spec is None:
            continue
        if isinstance(spec, str) or not isinstance(spec, (tuple, list)) or len(spec) != 2:
            raise ValueError(f"{name}: must be a pair (axis or None, axis or None), got {spec!r}")
    (i_axis, j_lhs), (j_rhs, k_axis) = tuple(lhs_spec), tuple(rhs_spec)
    steps = []
    if j_lhs is not None and j_lhs == j_rhs:
        steps.append(("partial sums: all-reduce (or reduce-scatter)", j_lhs))
    else:
        if j_lhs is not None:
            steps.append(("all-gather A along J", j_lhs))
        if j_rhs is not None:
            steps.append(("all-gather B along J", j_rhs))
    if i_axis is not None and i_axis == k_axis:
        keep_on_k = out_spec is not None and tuple(out_spec)[1] == k_axis
        if out_spec is not None and not keep_on_k and tuple(out_spec)[0] != i_axis:
            raise ValueError(
                f"out_spec: {tuple(out_spec)!r} keeps axis {i_axis!r} on neither I nor K; "
                "C can keep the shared axis on one of its two dimensions only"
            )
        if keep_on_k:
            steps.append(("all-gather A along I", i_axis))
            i_axis = None
        else:
            steps.append(("all-gather B along K", k_axis))
            k_axis = None
    return steps, (i_axis, k_axis)


_validate.guard_module(globals())
