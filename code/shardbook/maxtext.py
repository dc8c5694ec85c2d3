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
