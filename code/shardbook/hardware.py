"""Accelerator presets: compute, memory and the bandwidth of each link tier.

Every value is a :class:`Sourced`: a float that also carries the references.bib
key it comes from and whether it is a vendor ``spec``, an ``achieved``
measurement, or ``derived`` by arithmetic from other cited figures.

Bandwidth fields say their direction in their name. A ``*_bytes_per_s`` field
without ``bidirectional`` is one direction; vendors often print the doubled
bidirectional figure, which lives in its own field and is never mixed in.
"""

import math
import re
from dataclasses import dataclass, field, fields, replace

from . import _validate
from .units import GB, PFLOP, TFLOP, GiB, gbit_per_s_to_bytes_per_s

SOURCE_KINDS = ("spec", "achieved", "derived")
FABRICS = ("full_mesh", "switch", "torus")
# Which slices of a torus close into rings: 'whole_cubes', a slice made of whole cubes of
# torus_wraparound_side chips a side wraps on every axis (v5p and Ironwood join 4 x 4 x 4
# cubes through optical circuit switches); 'full_axis', an axis wraps when the slice spans
# it, torus_wraparound_side chips (v5e and v6e pods of 16 x 16). Ref: scaling-book-tpus.
WRAPAROUND_RULES = ("whole_cubes", "full_axis")
SCALE_OUT_LAYOUTS = ("rail_optimized", "unspecified", "dcn")


class Sourced(float):
    """A float with provenance: ``source`` (a references.bib key) and ``kind``."""

    def __new__(cls, value, source, kind="spec", note=""):
        if kind not in SOURCE_KINDS:
            raise ValueError(f"kind: unknown value {kind!r}; valid: {', '.join(SOURCE_KINDS)}")
        if not isinstance(source, str) or not source:
            raise ValueError("source: every figure needs a references.bib key")
        self = super().__new__(cls, value)
        self.source = source
        self.kind = kind
        self.note = note
        return self

    def __repr__(self):
        return f"Sourced({float(self)!r}, source={self.source!r}, kind={self.kind!r})"

    def __reduce__(self):
        return (Sourced, (float(self), self.source, self.kind, self.note))


# The most dimensions a torus here may have: TPUs have 2 or 3; the most of any machine built
# is 6 (Fujitsu's Tofu interconnect). A larger count is a typo, and the planner's placement
# walks every dimension (10**5 of them took minutes).
MAX_TORUS_DIMS = 6
# The longest side a torus slice wraps around at: 4 (v5p, Ironwood) and 16 (v5e, v6e) today
MAX_TORUS_SIDE = 2**20


@dataclass(frozen=True)
class Accelerator:
    """One accelerator and the links around it.

    - ``name``: preset name.
    - ``family``: 'gpu' or 'tpu'.
    - ``scale_up_fabric``: what the scale-up links form. 'full_mesh': a direct
      link to each of the other domain members (MI300X, MI355X: n-1 peer
      links per device); 'switch': every device reaches every other through
      switches, limited by its own egress (NVLink/NVSwitch, NVL72);
      'torus': links to neighbours along each torus axis, two per axis,
      with wraparound where the slice's shape allows it (TPU ICI; which
      shapes: fabric.has_wraparound).
    - ``torus_dims``: dimensions of the torus (0 when the fabric is not a torus).
    - ``torus_wraparound_side`` and ``torus_wraparound_rule``: which slices of a
      torus close into rings (WRAPAROUND_RULES; 0 and '' when not a torus).
    - ``scale_out_layout``: 'rail_optimized' (device i of every node shares a
      leaf switch), 'unspecified' (the source gives no switch topology),
      or 'dcn' (TPU data-center network).
    - ``bf16_dense_flops_per_s``: peak dense BF16 matmul FLOP/s (no sparsity).
    - ``hbm_bytes``: HBM capacity of one device.
    - ``scale_up_link_bytes_per_s``: one direction of one scale-up link (one xGMI
      peer, one NVLink link, one ICI link).
    - ``scale_up_link_bidirectional_bytes_per_s``: the same link, both directions.
    - ``scale_up_egress_bytes_per_s``: one direction, all scale-up links of one device.
    - ``scale_up_domain_size``: devices reachable over scale-up links (a node, an
      NVL72 rack, a TPU pod).
    - ``scale_out_bytes_per_s``: one direction of the scale-out path per device
      (its NIC share, or DCN per TPU chip).
    - ``scale_out_nics_per_device``: scale-out NICs per device, as the source
      counts them (1 on every preset: one NIC per GPU, the DCN share per chip).
    - ``host_link_bytes_per_s``: one direction of the host/I/O path (PCIe), where cited.
    - ``largest_slice_devices``: the most devices one job may join over scale-up
      links, where the scheduler grants less than the domain (v5p: 6,144 of a
      pod's 8,960 chips); none: the whole domain.
    - ``calibration``: an accelerator read from a file, its [calibration]
      table (a planner.calibrate.FileCalibration), else None. It travels with
      the object, so a second file read under the same name prices only its
      own accelerator; it counts in equality and hashing, so the planner's
      caches, keyed by the accelerator, keep two calibrations apart.
    """

    name: str
    family: str
    scale_up_fabric: str
    scale_out_layout: str
    bf16_dense_flops_per_s: Sourced
    hbm_bytes: Sourced
    scale_up_link_bytes_per_s: Sourced
    scale_up_link_bidirectional_bytes_per_s: Sourced
    scale_up_egress_bytes_per_s: Sourced
    scale_up_domain_size: Sourced
    scale_out_bytes_per_s: Sourced
    scale_out_nics_per_device: Sourced
    host_link_bytes_per_s: Sourced | None = None
    largest_slice_devices: Sourced | None = None
    torus_dims: int = 0
    torus_wraparound_side: int = 0
    torus_wraparound_rule: str = ""
    calibration: object = field(default=None, repr=False)

    OPTIONAL = ("host_link_bytes_per_s", "largest_slice_devices")
    ATTACHED = ("calibration",)  # carried with the accelerator; neither a figure nor a description
    DESCRIPTIVE = (
        "name",
        "family",
        "scale_up_fabric",
        "scale_out_layout",
        "torus_dims",
        "torus_wraparound_side",
        "torus_wraparound_rule",
    )

    def __post_init__(self):
        _validate.choice("family", self.family, ("gpu", "tpu"))
        _validate.choice("scale_up_fabric", self.scale_up_fabric, FABRICS)
        _validate.choice("scale_out_layout", self.scale_out_layout, SCALE_OUT_LAYOUTS)
        self._check_torus()
        self._check_figures()

    def _check_torus(self):
        for name, most in (("torus_dims", MAX_TORUS_DIMS), ("torus_wraparound_side", MAX_TORUS_SIDE)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
                raise ValueError(f"{self.name}.{name}: must be an integer from 0 to {most}, got {value!r}")
        if (self.scale_up_fabric == "torus") != (self.torus_dims > 0):
            raise ValueError(f"{self.name}.torus_dims: must be > 0 exactly when scale_up_fabric is 'torus'")
        if self.scale_up_fabric == "torus":
            if not self.torus_wraparound_side > 0:
                raise ValueError(
                    f"{self.name}.torus_wraparound_side: a torus needs the side its slices must span to wrap "
                    f"(v5p and Ironwood 4, v5e and v6e 16), got {self.torus_wraparound_side!r}"
                )
            _validate.choice("torus_wraparound_rule", self.torus_wraparound_rule, WRAPAROUND_RULES)
        elif self.torus_wraparound_side or self.torus_wraparound_rule:
            given = "torus_wraparound_side" if self.torus_wraparound_side else "torus_wraparound_rule"
            raise ValueError(
                f"{self.name}.{given}: only a torus has a wraparound rule (scale_up_fabric is {self.scale_up_fabric!r})"
            )

    def _check_figures(self):
        for f in fields(self):
            if f.name in self.DESCRIPTIVE or f.name in self.ATTACHED:
                continue
            value = getattr(self, f.name)
            if value is None and f.name in self.OPTIONAL:
                continue
            if value is None:
                raise ValueError(f"{self.name}.{f.name}: missing value")
            if not isinstance(value, Sourced):
                raise ValueError(
                    f"{self.name}.{f.name}: must be a hardware.Sourced (a value with its source), got {value!r}"
                )
            if not (value > 0 and math.isfinite(float(value))):
                raise ValueError(f"{self.name}.{f.name}: must be positive and finite, got {float(value)!r}")
        for name in ("scale_up_domain_size", "largest_slice_devices"):
            value = getattr(self, name)
            if value is not None and float(value) != int(value):
                raise ValueError(f"{self.name}.{name}: must be a whole number of devices, got {float(value)!r}")
        if self.largest_slice_devices is not None and self.largest_slice_devices > self.scale_up_domain_size:
            raise ValueError(
                f"{self.name}.largest_slice_devices: at most the scale-up domain's "
                f"{int(self.scale_up_domain_size):,} devices, got {int(self.largest_slice_devices):,}"
            )
        # one link in one direction can carry no more than both directions, nor than the whole egress
        link = float(self.scale_up_link_bytes_per_s)
        for name, what in (
            ("scale_up_link_bidirectional_bytes_per_s", "both directions of a link"),
            ("scale_up_egress_bytes_per_s", "the device's whole scale-up egress"),
        ):
            if float(getattr(self, name)) < link:
                raise ValueError(
                    f"{self.name}.{name}: {what} must carry at least one link in one direction "
                    f"(scale_up_link_bytes_per_s, {link:.4g} bytes/s), got {float(getattr(self, name)):.4g}"
                )

    @property
    def collective_bytes_per_s(self):
        """W in α = C/W, as the Scaling Book uses it: on a TPU the
        bidirectional bandwidth of one ICI link, what a chip sends along one
        wrapped torus axis (one direction over each of its two links there);
        on a GPU the one-direction scale-up egress of one device."""
        if self.family == "tpu":
            return self.scale_up_link_bidirectional_bytes_per_s
        return self.scale_up_egress_bytes_per_s

    @property
    def scale_up_links_per_device(self):
        """Scale-up links one device drives at once: egress / link rate
        (7 on an 8-GPU full mesh, 18 NVLinks, 2 per torus axis)."""
        return round(self.scale_up_egress_bytes_per_s / self.scale_up_link_bytes_per_s)

    @property
    def domain_egress_bytes_per_s(self):
        """One direction of scale-out leaving a whole scale-up domain
        (node egress for an 8-GPU node): domain size x per-device scale-out."""
        return self.scale_up_domain_size * self.scale_out_bytes_per_s

    def figures(self):
        """(field, Sourced) pairs of every value, in declaration order."""
        return [
            (f.name, getattr(self, f.name))
            for f in fields(self)
            if f.name not in self.DESCRIPTIVE and f.name not in self.ATTACHED and getattr(self, f.name) is not None
        ]


def _f(value, source, kind="spec", note=""):
    return Sourced(value, source, kind, note)


def _mi355x():
    src = "amd-mi355x-datasheet"
    link = 76.8 * GB
    return Accelerator(
        name="MI355X",
        family="gpu",
        scale_up_fabric="full_mesh",
        scale_out_layout="unspecified",
        bf16_dense_flops_per_s=_f(2516.6 * TFLOP, src),
        hbm_bytes=_f(288 * GB, src),
        scale_up_link_bytes_per_s=_f(link, "scale-your-model-amd", note="xGMI, per peer, one direction"),
        scale_up_link_bidirectional_bytes_per_s=_f(2 * link, src, note="xGMI, per peer"),
        scale_up_egress_bytes_per_s=_f(7 * link, "scale-your-model-amd", "derived", "7 peers x 76.8 GB/s"),
        scale_up_domain_size=_f(8, "scale-your-model-amd", note="one UBB, one-hop full mesh"),
        scale_out_bytes_per_s=_f(gbit_per_s_to_bytes_per_s(400), "scale-your-model-amd", note="400 Gb/s reference NIC"),
        scale_out_nics_per_device=_f(1, "scale-your-model-amd", note="one NIC per GPU in the reference design"),
        host_link_bytes_per_s=_f(64 * GB, "scale-your-model-amd", note="PCIe Gen5 x16"),
    )


def _mi300x():
    src = "amd-mi300x-datasheet"
    link = 64 * GB
    return Accelerator(
        name="MI300X",
        family="gpu",
        scale_up_fabric="full_mesh",
        scale_out_layout="unspecified",
        bf16_dense_flops_per_s=_f(1307.4 * TFLOP, src),
        hbm_bytes=_f(192 * GB, src),
        scale_up_link_bytes_per_s=_f(
            link, src, "derived", "xGMI, per peer, one direction: 128 GB/s per link printed for both directions, halved"
        ),
        scale_up_link_bidirectional_bytes_per_s=_f(2 * link, src, note="xGMI, 128 GB/s per link"),
        scale_up_egress_bytes_per_s=_f(7 * link, src, "derived", "7 peers x 64 GB/s"),
        scale_up_domain_size=_f(8, src),
        # the AMD chapter's 400 Gb/s NIC is its MI355X reference design; a deployed
        # MI300X platform (Azure ND MI300X v5: 8 MI300X, 8 x 400 Gb/s NDR) has the same
        scale_out_bytes_per_s=_f(
            gbit_per_s_to_bytes_per_s(400), "azure-nd-mi300x-v5", note="8 x 400 Gb/s NDR per 8 GPUs"
        ),
        scale_out_nics_per_device=_f(1, "azure-nd-mi300x-v5", note="8 NICs per 8-GPU VM, one per GPU"),
        host_link_bytes_per_s=_f(64 * GB, src, note="PCIe Gen5 x16"),
    )


def _hopper(name, src, hbm_gb, nvlink_links, board_src=None):
    # NVLink 4: 25 GB/s per link per direction (the NVLink page prints 900 GB/s over 18 links,
    # both directions); H100/H200 have 18 links, H800 8. `board_src`: where the node and host
    # link are printed, when not in `src` (H800 SXM, H100 SXM's export variant: H100's datasheet).
    link = 25 * GB
    board = board_src or src
    return Accelerator(
        name=name,
        family="gpu",
        scale_up_fabric="switch",
        scale_out_layout="rail_optimized",
        bf16_dense_flops_per_s=_f(989.5 * TFLOP, src, "derived", "1,979 TFLOP/s with sparsity, halved"),
        hbm_bytes=_f(hbm_gb * GB, src),
        scale_up_link_bytes_per_s=_f(link, "nvidia-nvlink", "derived", "900 GB/s over 18 links, per direction"),
        scale_up_link_bidirectional_bytes_per_s=_f(2 * link, "nvidia-nvlink", "derived", "900 GB/s over 18 links"),
        scale_up_egress_bytes_per_s=_f(nvlink_links * link, src, "derived", f"{nvlink_links} NVLinks x 25 GB/s"),
        scale_up_domain_size=_f(8, board, note="8-GPU HGX node"),
        scale_out_bytes_per_s=_f(gbit_per_s_to_bytes_per_s(400), "scaling-book-gpus", note="one 400 Gb/s NIC per GPU"),
        scale_out_nics_per_device=_f(1, "scaling-book-gpus", note="8 NICs per node, rail-optimized"),
        host_link_bytes_per_s=_f(
            64 * GB, board, "derived", "PCIe Gen5 x16; 128 GB/s printed for both directions, halved"
        ),
    )


def _a100():
    """A100 80 GB SXM on an 8-GPU HGX/DGX A100 board: NVLink 3 (12 links of
    25 GB/s per direction, 600 GB/s bidirectional per GPU) through NVSwitch;
    one 200 Gb/s HDR InfiniBand HCA per GPU for compute traffic (DGX A100:
    eight compute HCAs per node, rail-optimized in a DGX SuperPOD); the
    Selene nodes of narayanan2021megatron. No in-switch reduction (NVLink
    SHARP arrived with third-generation NVSwitch, on Hopper)."""
    src = "nvidia-a100-datasheet"
    link = 25 * GB
    return Accelerator(
        name="A100",
        family="gpu",
        scale_up_fabric="switch",
        scale_out_layout="rail_optimized",
        bf16_dense_flops_per_s=_f(312 * TFLOP, src, "derived", "624 TFLOP/s with sparsity, halved"),
        hbm_bytes=_f(80 * GB, src, note="80 GB HBM2e, 2,039 GB/s (SXM)"),
        scale_up_link_bytes_per_s=_f(
            link, "nvidia-nvlink", "derived", "NVLink 3: 600 GB/s over 12 links, per direction"
        ),
        scale_up_link_bidirectional_bytes_per_s=_f(
            2 * link, "nvidia-nvlink", "derived", "NVLink 3: 600 GB/s over 12 links"
        ),
        scale_up_egress_bytes_per_s=_f(
            12 * link, src, "derived", "12 NVLinks x 25 GB/s; 600 GB/s printed for both directions"
        ),
        scale_up_domain_size=_f(8, "nvidia-dgx-a100-superpod", note="8-GPU HGX A100 board, NVSwitch"),
        scale_out_bytes_per_s=_f(
            gbit_per_s_to_bytes_per_s(200), "nvidia-dgx-a100-superpod", note="one 200 Gb/s HDR InfiniBand HCA per GPU"
        ),
        scale_out_nics_per_device=_f(
            1, "nvidia-dgx-a100-superpod", note="8 compute HCAs per DGX A100 node (2 more for storage)"
        ),
        host_link_bytes_per_s=_f(32 * GB, src, "derived", "PCIe Gen4 x16; 64 GB/s printed for both directions, halved"),
    )


def _blackwell(name, src, flops, hbm_gb, domain, nic_gbit, flops_note, hbm_note):
    # NVLink 5: 50 GB/s per link per direction, 18 links per GPU (1,800 GB/s both ways). The
    # system pages print the whole system's figures: peak and HBM are per GPU by division.
    link = 50 * GB
    return Accelerator(
        name=name,
        family="gpu",
        scale_up_fabric="switch",
        scale_out_layout="rail_optimized",
        bf16_dense_flops_per_s=_f(flops, src, "derived", flops_note),
        hbm_bytes=_f(hbm_gb * GB, src, "derived", hbm_note),
        scale_up_link_bytes_per_s=_f(link, "nvidia-nvlink", "derived", "1,800 GB/s over 18 links, per direction"),
        scale_up_link_bidirectional_bytes_per_s=_f(2 * link, "nvidia-nvlink", "derived", "1,800 GB/s over 18 links"),
        scale_up_egress_bytes_per_s=_f(18 * link, src, "derived", "18 NVLinks x 50 GB/s"),
        scale_up_domain_size=_f(domain, src),
        scale_out_bytes_per_s=_f(gbit_per_s_to_bytes_per_s(nic_gbit), src, note=f"{nic_gbit} Gb/s NIC per GPU"),
        scale_out_nics_per_device=_f(1, src, note="one NIC per GPU"),
    )


def _tpu(
    name,
    src,
    flops,
    hbm_bytes,
    ici_chip_bidirectional,
    n_links,
    pod_chips,
    dcn,
    dcn_src,
    dcn_kind,
    dcn_note,
    wraparound,
    ici_src=None,
    largest_slice=None,
):
    """A TPU from Google's tables: ICI is printed per chip, both directions of
    all its links together; one link, one direction is that / (2 · links).
    `wraparound`: (torus_wraparound_side, torus_wraparound_rule)."""
    ici_src = ici_src or src
    link = ici_chip_bidirectional / (2 * n_links)
    per_chip = f"{ici_chip_bidirectional / GB:g} GB/s per chip, both directions, over {n_links} links"
    return Accelerator(
        name=name,
        family="tpu",
        scale_up_fabric="torus",
        scale_out_layout="dcn",
        torus_dims=n_links // 2,
        torus_wraparound_side=wraparound[0],
        torus_wraparound_rule=wraparound[1],
        largest_slice_devices=largest_slice,
        bf16_dense_flops_per_s=_f(flops, src),
        hbm_bytes=_f(hbm_bytes, src),
        scale_up_link_bytes_per_s=_f(link, ici_src, "derived", per_chip),
        scale_up_link_bidirectional_bytes_per_s=_f(2 * link, ici_src, "derived", per_chip),
        scale_up_egress_bytes_per_s=_f(n_links * link, ici_src, "derived", f"{n_links} ICI links x one direction"),
        scale_up_domain_size=_f(pod_chips, src, note="chips in one ICI-connected pod"),
        scale_out_bytes_per_s=_f(dcn, dcn_src, dcn_kind, dcn_note),
        scale_out_nics_per_device=_f(1, dcn_src, note="DCN share of one chip"),
    )


def _ironwood():
    # Google's TPU7x table for C, HBM, pod size and DCN ("Data center network
    # (DCN) bandwidth per chip (Gb/s)": 100); 1.2 TB/s of ICI per chip, both
    # directions, from Google's announcement
    return _tpu(
        "Ironwood",
        "google-tpu7x",
        2307 * TFLOP,
        192 * GiB,
        1200 * GB,
        6,
        9216,
        gbit_per_s_to_bytes_per_s(100),
        "google-tpu7x",
        "spec",
        "100 Gb/s of DCN per chip",
        (4, "whole_cubes"),  # built like v5p's pod (google-tpu7x)
        ici_src="google-ironwood",
    )


# The Scaling Book's per-link ICI figures (one direction), with which its
# published thresholds were computed (v5p: α = 4.59e14 / 1.8e11 = 2,550).
# Google's tables, which the presets follow, give about 10 % more.
SCALING_BOOK_ICI_LINK_BYTES_PER_S = {
    "TPU v5e": Sourced(4.5e10, "scaling-book-tpus", "spec", "ICI, one link, one direction"),
    "TPU v5p": Sourced(9e10, "scaling-book-tpus", "spec", "ICI, one link, one direction"),
    "TPU v6e": Sourced(9e10, "scaling-book-tpus", "spec", "ICI, one link, one direction"),
}


# Dense FP8 matmul peaks where the book compares them with BF16. TPU v5p has
# no faster FP8: Google's TPU7x table prints its FP8 peak equal to BF16 (its
# doubled rate is int8), so an FP8 argument needs a machine such as these.
FP8_DENSE_FLOPS_PER_S = {
    "H100": Sourced(1979 * TFLOP, "nvidia-h100-datasheet", "spec", "3,958 TFLOP/s FP8 with sparsity, halved"),
    "TPU v5p": Sourced(459 * TFLOP, "google-tpu7x", "spec", "FP8 peak as printed: the BF16 rate"),
    "Ironwood": Sourced(4614 * TFLOP, "google-tpu7x", "spec", "Peak compute per chip (FP8)"),
}


# Google prints v5e and v6e HBM in GB on their own pages (16 GB, 32 GB), which
# the presets follow, but its TPU7x comparison table gives v6e "32" in a GiB
# column: Google's tables disagree, by GiB/GB = 1.074.
TPU7X_TABLE_V6E_HBM_BYTES = Sourced(32 * GiB, "google-tpu7x", "spec", "v6e column, 'HBM capacity per chip (GiB)'")


_BUILDERS = {
    "MI355X": _mi355x,
    "MI300X": _mi300x,
    "A100": _a100,
    "H100": lambda: _hopper("H100", "nvidia-h100-datasheet", 80, 18),
    "H200": lambda: _hopper("H200", "nvidia-h200-datasheet", 141, 18),
    "H800": lambda: _hopper("H800", "parallelize-transformer", 80, 8, board_src="nvidia-h100-datasheet"),
    "B200": lambda: _blackwell(
        "B200",
        "nvidia-dgx-b200",
        2.25 * PFLOP,
        180,
        8,
        400,
        "72 PFLOPS FP8 training (with sparsity) over 8 GPUs, halved for dense and again for BF16",
        "1,440 GB over 8 GPUs",
    ),
    "GB200 NVL72": lambda: _blackwell(
        "GB200 NVL72",
        "nvidia-gb200-nvl72",
        2.5 * PFLOP,
        186,
        72,
        400,
        "360 PFLOPS BF16 (with sparsity) over 72 GPUs, halved",
        "13.4 TB over 72 GPUs",
    ),
    "GB300 NVL72": lambda: _blackwell(
        "GB300 NVL72",
        "nvidia-gb300-nvl72",
        2.5 * PFLOP,
        288,
        72,
        800,
        "360 PFLOPS BF16 (with sparsity) over 72 GPUs, halved",
        "20.7 TB over 72 GPUs",
    ),
    "TPU v5e": lambda: _tpu(
        "TPU v5e",
        "google-tpu-v5e",
        197 * TFLOP,
        16 * GB,
        400 * GB,
        4,
        256,
        6.4e12 / 8 / 256,
        "google-tpu-v5e",
        "derived",
        "6.4 Tb/s of DCN per 256-chip pod",
        (16, "full_axis"),
    ),
    # HBM as Google's table prints it: 95 GiB
    "TPU v5p": lambda: _tpu(
        "TPU v5p",
        "google-tpu-v5p",
        459 * TFLOP,
        95 * GiB,
        1200 * GB,
        6,
        8960,
        gbit_per_s_to_bytes_per_s(50),
        "google-tpu-v5p",
        "spec",
        "50 Gb/s of DCN per chip",
        (4, "whole_cubes"),
        # Google's v5p page: the largest job one slice can hold is 96 cubes,
        # 16 x 16 x 24 = 6,144 chips, of the pod's 8,960; more needs Multislice over DCN
        largest_slice=_f(6144, "google-tpu-v5p", note="16 x 16 x 24, 96 cubes"),
    ),
    "TPU v6e": lambda: _tpu(
        "TPU v6e",
        "google-tpu-v6e",
        918 * TFLOP,
        32 * GB,
        800 * GB,
        4,
        256,
        25.6e12 / 8 / 256,
        "google-tpu-v6e",
        "derived",
        "25.6 Tb/s of DCN per 256-chip pod (4 x 200 Gb/s NICs per 8-chip host)",
        (16, "full_axis"),
    ),
    "Ironwood": _ironwood,
}

PRESETS = {name: build() for name, build in _BUILDERS.items()}


def _h100_grand_teton():
    """The H100 of Meta's Grand Teton hosts, on which torchtitan's team ran its
    benchmarks (torchtitan-benchmarks: llama3_h100_202412_torchtitan.md and
    asyncTP_llama3_h100_2025-06_torchtitan.md): eight H100 per host "fully
    connected with NVLink", "96GB HBM2e with 2.4 TB/sec peak memory
    bandwidth", "400 Gb/s per GPU" of RDMA network, "the default 500W power
    limit" (an H100 SXM's TDP is 700 W). The die is GH100, as H100's: its
    peak is taken as H100 SXM's, the peak torchtitan's own MFU divides by,
    though the source says the part's "actual peak TFLOPs number is between
    SXM and NVL, and we don't know its exact value"; what the power limit
    costs is therefore not in the preset, and the runs carry it."""
    src = "torchtitan-benchmarks"
    base = _hopper("H100 Grand Teton", "nvidia-h100-datasheet", 80, 18)
    return replace(
        base,
        bf16_dense_flops_per_s=_f(
            989.5 * TFLOP,
            src,
            "derived",
            "H100 SXM's dense BF16 peak; the source: the actual peak of this 500 W part lies between SXM's and NVL's",
        ),
        hbm_bytes=_f(96 * GB, src, note="96GB HBM2e, 2.4 TB/s"),
        scale_up_domain_size=_f(8, src, note="8 H100 per Grand Teton host, fully connected with NVLink"),
        scale_out_bytes_per_s=_f(gbit_per_s_to_bytes_per_s(400), src, note="backend RDMA network, 400 Gb/s per GPU"),
    )


# Hardware a published run ran on that is not offered as a preset: a site's own build of a part,
# which the planner prices by name (`get`) for those runs (shardbook.measured) but does not list
# among the presets a reader plans on (`names`, the chapters' tables, the planner page).
RUN_HARDWARE = {acc.name: acc for acc in (_h100_grand_teton(),)}


def names():
    """Names of every accelerator preset."""
    return list(PRESETS)


def get(name):
    """The preset called `name` (or `name` itself if it is an Accelerator)."""
    if isinstance(name, Accelerator):
        return name
    try:
        return PRESETS[name] if name in PRESETS else RUN_HARDWARE[name]
    except (KeyError, TypeError):
        raise ValueError(f"accelerator: unknown preset {name!r}; {_nearest(name)}known: {', '.join(PRESETS)}") from None


# other names readers use for a preset (Google Cloud's TPU7x for Ironwood, Trillium for v6e)
ALIASES = {"7x": "Ironwood", "v7": "Ironwood", "v7x": "Ironwood", "trillium": "TPU v6e"}


def _nearest(name):
    """'did you mean ...? ' for the presets `name` may mean (case, spaces,
    hyphens and a leading 'TPU' aside): the one it spells, or an alias's;
    else those whose name starts with it, then difflib's closest; else ''."""
    import difflib

    def fold(text):
        return re.sub(r"[\s_-]+", "", str(text)).lower().removeprefix("tpu")

    key = fold(name)
    folded = {fold(n): n for n in PRESETS}
    if key in folded or key in ALIASES:
        close = [folded.get(key) or ALIASES[key]]
    else:
        close = [n for k, n in folded.items() if key and k.startswith(key)]
        close += [
            folded[k] for k in difflib.get_close_matches(key, list(folded), n=3, cutoff=0.6) if folded[k] not in close
        ]
    return f"did you mean {' or '.join(repr(n) for n in close[:3])}? " if close else ""


def alpha(name):
    """α = C/W for a preset, in FLOPs per byte (see collective_bytes_per_s)."""
    acc = get(name)
    return acc.bf16_dense_flops_per_s / acc.collective_bytes_per_s


# the v5p preset's largest slice (largest_slice_devices), by the name the chapters use
TPU_V5P_LARGEST_SLICE_CHIPS = PRESETS["TPU v5p"].largest_slice_devices
# The same page: "Single slice training is supported for up to 6144 chips. You can
# scale up to 18432 chips using Multislice."
TPU_V5P_MULTISLICE_MAX_CHIPS = Sourced(18432, "google-tpu-v5p", "spec", "largest Multislice job")


_validate.guard_module(globals())
