"""MaxText's logical-axis rules, resolved to a PartitionSpec (stdlib only).

A layer names each tensor dimension logically ("exp", "embed_moe", ...); a
rule table maps each logical name to a list of mesh axes. For a given mesh,
a dimension is split by the rule's mesh axes that have size > 1 and that no
earlier dimension of the same tensor already uses. Ref: maxtext,
scale-your-model-amd.
"""

from . import _validate

# The rules the AMD chapter quotes from MaxText's base.yml (release v26.6).
DEFAULT_RULES = {
    "activation_batch_moe": ("data", "fsdp", "fsdp_transpose", "expert"),
    "exp": ("expert",),
    "embed_moe": ("fsdp", "fsdp_transpose", "context"),
    "mlp_moe": ("fsdp_transpose", "tensor", "tensor_sequence", "autoregressive"),
}

# MaxText's mesh axes for the one-node meshes of the case study.
MESH_AXES = (
    "data",
    "stage",
    "fsdp",
    "fsdp_transpose",
    "sequence",
    "context",
    "context_autoregressive",
    "tensor",
    "tensor_transpose",
    "tensor_sequence",
    "expert",
    "autoregressive",
)


def mesh_from_config(ici, dcn=None):
    """Mesh axis sizes from ici_*_parallelism (and dcn_*) values: axes not
    given are 1; ICI and DCN sizes multiply."""
    dcn = dcn or {}
    for name, table in (("ici", ici), ("dcn", dcn)):
        if not isinstance(table, dict):
            raise ValueError(f"{name}: must be a dict of mesh axis to size, got {table!r}")
        for axis, size in table.items():
            _validate.choice(f"{name} axis", axis, MESH_AXES)
            _validate.count(f"{name}[{axis!r}]", size)
    return {axis: ici.get(axis, 1) * dcn.get(axis, 1) for axis in MESH_AXES}


def parallelism(settings, devices_per_slice, n_slices=1):
    """The ICI and DCN axis sizes that MaxText's `ici_<axis>_parallelism`
    and `dcn_<axis>_parallelism` settings give, as its create_device_mesh
    resolves them: at most one -1 per network, filled so that the ICI sizes
    multiply to the devices of one slice and the DCN sizes to the number of
    slices. Returns (ici, dcn), dicts of axis -> size (size-1 axes left
    out), the shapes create_hybrid_device_mesh takes in MESH_AXES order.
    Ref: maxtext, scale-your-model-amd."""
    _validate.count("devices_per_slice", devices_per_slice)
    _validate.count("n_slices", n_slices)
    if not isinstance(settings, dict):
        raise ValueError(f"settings: must be a dict of MaxText settings, got {settings!r}")
    tables = {"ici": {}, "dcn": {}}
    for key, size in settings.items():
        prefix, _, rest = str(key).partition("_")
        axis = rest[: -len("_parallelism")] if rest.endswith("_parallelism") else None
        if prefix not in tables or axis is None:
            raise ValueError(f"settings: {key!r} is not an ici_<axis>_parallelism or dcn_<axis>_parallelism setting")
        _validate.choice(f"{key}: axis", axis, MESH_AXES)
        if isinstance(size, bool) or not isinstance(size, int) or (size < 1 and size != -1):
            raise ValueError(f"{key}: must be a positive integer or -1 (fill from the device count), got {size!r}")
        tables[prefix][axis] = size
    for prefix, total, what in (("ici", devices_per_slice, "devices per slice"), ("dcn", n_slices, "slices")):
        table = tables[prefix]
        unknown = [a for a, size in table.items() if size == -1]
        if len(unknown) > 1:
            raise ValueError(f"{prefix}: at most one axis may be -1, got {', '.join(unknown)}")
        product = 1
        for size in table.values():
            product *= size if size != -1 else 1
        if unknown:
            if total % product:
                raise ValueError(
                    f"{prefix}_{unknown[0]}_parallelism: -1 cannot fill {total} {what}: the other sizes multiply to {product}"
                )
            table[unknown[0]] = total // product
        elif product != total:
            raise ValueError(f"{prefix}: the sizes multiply to {product}, but there are {total} {what}")
    return tuple({a: tables[p][a] for a in MESH_AXES if tables[p].get(a, 1) > 1} for p in ("ici", "dcn"))


def resolve(logical_axes, mesh, rules=None):
    """The physical spec of a tensor whose dimensions have these logical
    names: one entry per dimension, None, a mesh axis, or a tuple of them."""
    rules = DEFAULT_RULES if rules is None else rules
    used = set()
    spec = []
    for name in logical_axes:
        if name is None:
            spec.append(None)
            continue
        if name not in rules:
            raise ValueError(f"logical_axes: no rule for {name!r}; rules exist for {', '.join(rules)}")
        axes = []
        for axis in rules[name]:
            if axis not in mesh:
                raise ValueError(f"rules[{name!r}]: mesh axis {axis!r} is not in the mesh")
            if mesh[axis] > 1 and axis not in used:
                axes.append(axis)
                used.add(axis)
        spec.append(None if not axes else axes[0] if len(axes) == 1 else tuple(axes))
    return tuple(spec)


_validate.guard_module(globals())
