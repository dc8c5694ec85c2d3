"""Measurements reported by the sources, kept as data with their source.

These are not results of this book: the book did not run them and cannot
rerun them. Chapters show them as cited evidence.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class MeshRun:
    model: str
    fsdp: int
    ep: int
    step_s: float
    tflops_per_s_per_device: float
    tokens_per_s_per_device: float
    rccl_active_s: float | None = None
    rccl_overlapped_fraction: float | None = None
    rccl_exposed_s: float | None = None
    source: str = "scale-your-model-amd"
    note: str = ""


# One complete v26.6 cell of Mixtral 8x22B on one 8-GPU MI355X node, fixed capacity.
MIXTRAL_8X22B_MI355X = (
    MeshRun("Mixtral 8x22B", 4, 2, 20.599, 385.3, 1590.7, note="the only complete cell; no variability reported"),
)

# deepseek2-16b on one 8-GPU MI355X node: mean of post-warmup steps 10-29; RCCL
# columns from separate rocprofv3 jobs over steps 10-12.
DEEPSEEK2_16B_MI355X = (
    MeshRun("deepseek2-16b", 8, 1, 0.9478, 283.6, 17286.2, 0.2352, 0.175, 0.1941),
    MeshRun("deepseek2-16b", 4, 2, 1.6856, 159.5, 9719.9, 1.3210, 0.396, 0.7981),
    MeshRun("deepseek2-16b", 2, 4, 1.4215, 189.1, 11526.6, 0.8901, 0.422, 0.5144),
    MeshRun("deepseek2-16b", 1, 8, 0.8591, 312.9, 19071.9, 0.2160, 0.793, 0.0447),
)


@dataclass(frozen=True)
class AchievedScaleUp:
    """A published achieved (not line-rate) scale-up bandwidth, one direction.

    per: 'link' (one peer link; a full mesh drives n-1 of them) or 'egress'
    (all of one device's links together, what a switch-limited group sees)."""

    accelerator: str
    per: str
    bytes_per_s: float
    source: str
    note: str


ACHIEVED_SCALE_UP = (
    # AMD: CRC and protocol overhead leave about 48 GB/s usable of each 64 GB/s xGMI link (about 75 %).
    AchievedScaleUp("MI300X", "link", 48e9, "amd-rccl-xgmi-blog", "usable xGMI rate per peer link, about 75 % of 64 GB/s"),
    # The interactive edition's hardware table: H100 NVLink achieves about 0.82 of its 450 GB/s.
    AchievedScaleUp("H100", "egress", 0.82 * 450e9, "parallelize-transformer", "achieved factor 0.82 on 450 GB/s NVLink egress"),
    # DeepSeek-V3 reports 160 GB/s of NVLink on H800 (spec 200 GB/s per direction).
    AchievedScaleUp("H800", "egress", 160e9, "deepseek2024v3", "NVLink bandwidth DeepSeek reports for its H800 nodes"),
)


def achieved_scale_up(accelerator):
    """The AchievedScaleUp record for a preset name, or None if none is published."""
    for entry in ACHIEVED_SCALE_UP:
        if entry.accelerator == accelerator:
            return entry
    return None
