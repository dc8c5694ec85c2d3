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

# MaxText's default mesh axes, in order (base.yml `mesh_axes`, MaxText at e591f30).
MESH_AXES = (
    "diloco",
    "data",
    "stage",
    "fsdp",
    "fsdp_transpose",
    "context",
    "context_usp_ulysses",
    "context_autoregressive",
    "tensor",
    "tensor_sequence",
    "expert",
    "autoregressive",
)

# The settings MaxText has: `ici_<name>_parallelism` / `dcn_<name>_parallelism`
# for each name here, and the mesh axes each one sizes (configs/types.py and
# utils/maxtext_utils.create_device_mesh build the same ici/dcn maps). The
# setting's name is not always the axis's: `pipeline` sizes the `stage` axis,
# and `tensor` sizes both `tensor` and `model` (an axis only custom mesh_axes
# lists). There is no `ici_stage_parallelism`.
SETTING_AXES = {
    "diloco": ("diloco",),
    "data": ("data",),
    "pipeline": ("stage",),
    "fsdp": ("fsdp",),
    "fsdp_transpose": ("fsdp_transpose",),
    "sequence": ("sequence",),
    "context": ("context",),
    "context_usp_ulysses": ("context_usp_ulysses",),
    "context_autoregressive": ("context_autoregressive",),
    "tensor": ("tensor", "model"),
    "tensor_sequence": ("tensor_sequence",),
    "expert": ("expert",),
    "autoregressive": ("autoregressive",),
}


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


def _setting(key, size, mesh_axes):
    """(network, the mesh axes it sizes) of one `<network>_<name>_parallelism`
    setting, or ValueError naming it."""
    prefix, _, rest = str(key).partition("_")
    name = rest[: -len("_parallelism")] if rest.endswith("_parallelism") else None
    if prefix not in ("ici", "dcn") or name is None:
        raise ValueError(f"settings: {key!r} is not an ici_<name>_parallelism or dcn_<name>_parallelism setting")
    if name == "stage":
        raise ValueError(
            f"{key}: MaxText has no such setting; the stage axis is sized by {prefix}_pipeline_parallelism"
        )
    _validate.choice(f"{key}: name", name, tuple(SETTING_AXES))
    if isinstance(size, bool) or not isinstance(size, int) or (size < 1 and size != -1):
        raise ValueError(f"{key}: must be a positive integer or -1 (fill from the device count), got {size!r}")
    axes = [a for a in SETTING_AXES[name] if a in mesh_axes]
    if not axes:
        raise ValueError(
            f"{key}: sizes the {'/'.join(SETTING_AXES[name])} axis, which mesh_axes does not have; "
            "MaxText would ignore the setting"
        )
    return prefix, axes


def _fill(prefix, table, total, what):
    """Replace the one -1 of `table` so that its sizes multiply to `total`
    (MaxText's fill_unspecified_mesh_axes), or ValueError."""
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


def parallelism(settings, devices_per_slice, n_slices=1, mesh_axes=MESH_AXES):
    """The ICI and DCN axis sizes that MaxText's `ici_<name>_parallelism`
    and `dcn_<name>_parallelism` settings give, as its create_device_mesh
    resolves them: each setting sizes the mesh axes SETTING_AXES names
    (`ici_pipeline_parallelism` the `stage` axis, `ici_tensor_parallelism`
    `tensor` and, where `mesh_axes` has it, `model`); settings not given are
    1; at most one -1 per network, filled so that the ICI sizes multiply to
    the devices of one slice and the DCN sizes to the number of slices.
    A setting MaxText does not have, or one no axis of `mesh_axes` takes
    (MaxText would ignore it), is refused. Returns (ici, dcn), dicts of
    axis -> size (size-1 axes left out), the shapes create_hybrid_device_mesh
    takes in `mesh_axes` order.
    Ref: maxtext (configs/types.py, utils/maxtext_utils.create_device_mesh,
    utils/max_utils.fill_unspecified_mesh_axes), scale-your-model-amd."""
    _validate.count("devices_per_slice", devices_per_slice)
    _validate.count("n_slices", n_slices)
    if not isinstance(settings, dict):
        raise ValueError(f"settings: must be a dict of MaxText settings, got {settings!r}")
    if isinstance(mesh_axes, str) or not isinstance(mesh_axes, (tuple, list)) or not mesh_axes:
        raise ValueError(f"mesh_axes: must be a non-empty list of mesh axis names, got {mesh_axes!r}")
    known_axes = sorted({a for axes in SETTING_AXES.values() for a in axes})
    for axis in mesh_axes:
        _validate.choice("mesh_axes", axis, known_axes)
    tables = {"ici": {}, "dcn": {}}
    for key, size in settings.items():
        prefix, axes = _setting(key, size, mesh_axes)
        for axis in axes:
            tables[prefix][axis] = size
    _fill("ici", tables["ici"], devices_per_slice, "devices per slice")
    _fill("dcn", tables["dcn"], n_slices, "slices")
    return tuple({a: tables[p][a] for a in mesh_axes if tables[p].get(a, 1) > 1} for p in ("ici", "dcn"))


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
