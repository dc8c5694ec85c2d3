"""A Candidate and `evaluate`, which runs the planner's steps for one mesh:
the step's shape (layout: placement and the parameters each device
holds), what a device keeps (memory_plan), and the step's time as a bound
and as an expectation (timing, calibrate).

Ref: narayanan2021megatron, korthikanti2022reducing, rajbhandari2020zero,
dubey2024llama3, deepseek2024v3, maxtext.
"""

import math
from dataclasses import dataclass, field

from .. import _validate, hardware, models
from . import calibrate, memory_plan, timing
from .layout import TooFewSequences, layout_plan
from .options import NAMES, PlanOptions
from .placement import DEFAULT_ORDER

__all__ = ["Candidate", "PlanOptions", "TooFewSequences", "evaluate", "evaluate_plan"]


@dataclass(frozen=True)
class Candidate:
    """One mesh the planner priced: its degrees per scheme, what a device
    keeps (`memory_breakdown`, bytes, on `memory_device`, the device that
    holds the most: "stage 0", "device 0 (stages 0 and 15)" under DualPipe,
    "the device" without a pipeline) and whether it fits, the time of each
    part of a step at the bound (math at peak, each scheme's collectives at
    line rate, the pipeline bubble), the bound's step time and MFU
    (`step_s`, `mfu`), the calibrated expectation (`expected_step_s`,
    `expected_mfu`, with its terms in `expected_terms`: each collective's
    seconds, `math` (matmuls and elementwise work), `elementwise` (the
    HBM-bound part of math), `bubble`, and two parts of math an MoE model
    adds, `grouped_gemm` (what its routed experts' grouped GEMMs spend
    beyond the sustained efficiency) and `permute` (the sorts of routed
    rows that expert parallelism adds, inside `elementwise`), and
    `fp8_cast` (in FP8, the quantizing of each matmul's inputs, inside
    `elementwise`)), of each
    collective the seconds on the critical path (`expected_exposed_s`) and,
    where it is worked out apart from the step's total, what no math can
    cover (`expected_uncovered_s`: FSDP's, timing.fsdp_uncovered_s), the
    options it was priced under (`seq_len`: tokens a sequence), the
    recomputation policies it would fit under (`fitting_policies`, of those
    it was priced over), and where each axis was placed on the machine."""

    fsdp: int
    tp: int
    ep: int
    pp: int
    state_bytes_per_device: float
    fits: bool
    math_s: float
    fsdp_s: float
    tp_s: float
    ep_s: float
    bubble_s: float
    step_s: float
    dp: int = 1
    cp: int = 1
    dp_s: float = 0.0
    cp_s: float = 0.0
    activation_bytes_per_device: float = 0.0
    recompute: str = "none"
    mfu: float = 0.0
    n_microbatches: float = 1.0
    placement: dict = field(default_factory=dict)
    pp_s: float = 0.0
    memory_breakdown: dict = field(default_factory=dict)
    hbm_bytes: float = 0.0
    expected_step_s: float = 0.0
    expected_mfu: float = 0.0
    expected_terms: dict = field(default_factory=dict)
    micro_batch_seqs: int = 1
    schedule: str = "1f1b"
    n_virtual: int = 1
    state_recipe: str = memory_plan.DEFAULT_STATE_RECIPE
    zero: int = 0
    attention: str = "flash"
    precision: str = "bf16"
    memory_device: str = "the device"
    expected_exposed_s: dict = field(default_factory=dict)
    expected_uncovered_s: dict = field(default_factory=dict)
    stack: str = "any"
    is_moe: bool = False
    eta_on_one_run_or_none: bool = False
    global_tokens: float = 0.0
    uneven_pipeline: bool = False
    keep_gathered_weights: bool = False
    fitting_policies: tuple = ()
    seq_len: int = 0

    @property
    def reserve_bytes(self):
        """HBM held back for the framework (context, communication buffers,
        fragmentation): the breakdown's reserve, 0 where it has none."""
        return self.memory_breakdown.get("reserve", 0.0)

    @property
    def expected_step_range_s(self):
        """(low, high): the step times, in seconds, that the leave-one-source-out
        errors of the stack family's runs (calibrate.step_band; of the runs
        priced at a prior where the accelerator's η rests on one run or none)
        put around `expected_step_s`: a measured step of expected / (1 +
        error) for the band's errors (calibrate.measured_over_expected)."""
        band = calibrate.step_band(self.stack, self.is_moe, self.eta_on_one_run_or_none)
        least, most = calibrate.measured_over_expected(*band)
        return self.expected_step_s * least, self.expected_step_s * most

    @property
    def hidden_comm_s(self):
        """Seconds of calibrated communication the expectation takes as hidden
        behind the math (each term's time less its exposed part)."""
        return sum(max(0.0, self.expected_terms[k] - v) for k, v in self.expected_exposed_s.items())

    @property
    def hidden_to_math(self):
        """hidden_comm_s over the expected matmul and elementwise time: how much
        of the math the overlap this row relies on must cover."""
        return self.hidden_comm_s / self.expected_terms["math"] if self.expected_terms else 0.0

    @property
    def tokens_per_s_per_device(self):
        """Training tokens per second per device at the expected step."""
        return self.global_tokens / (self.expected_step_s * self.n_devices)

    @property
    def n_devices(self):
        return math.prod(self.mesh.values())

    def days_per_tokens(self, tokens):
        """Days to train `tokens` tokens at the expected step."""
        _validate.positive("tokens", tokens)
        return tokens / (self.tokens_per_s_per_device * self.n_devices) / 86_400

    @property
    def mesh(self):
        """The degrees as a dict over every axis."""
        return {"dp": self.dp, "fsdp": self.fsdp, "tp": self.tp, "cp": self.cp, "ep": self.ep, "pp": self.pp}

    @property
    def label(self):
        """The mesh as text, axes of degree 1 left out."""
        return " × ".join(f"{k} {v}" for k, v in self.mesh.items() if v > 1) or "1 device"

    @property
    def memory_bytes_per_device(self):
        """What the training step keeps: the breakdown less the reserve and the headroom."""
        if self.memory_breakdown:
            return sum(v for k, v in self.memory_breakdown.items() if k not in ("headroom", "reserve"))
        return self.state_bytes_per_device + self.activation_bytes_per_device

    @property
    def exposed_comm_s(self):
        """Bound step time left after the math and the bubble."""
        return self.step_s - self.math_s - self.bubble_s


def evaluate(
    model,
    accelerator,
    mesh,
    global_tokens,
    *,
    seq_len=4096,
    micro_batch_seqs=1,
    recompute=None,
    order=DEFAULT_ORDER,
    schedule="1f1b",
    n_virtual=1,
    sequence_parallel=True,
    attention="flash",
    state_recipe=memory_plan.DEFAULT_STATE_RECIPE,
    zero=0,
    n_devices=None,
    uneven_pipeline=False,
    keep_gathered_weights=False,
    ideal_overlap=False,
    grad_reduce_overlap=True,
    dense_over_ep=True,
    routing_node_limit=None,
    fp8_dispatch=False,
    precision="bf16",
    tp_comm_overlap=False,
    capacity_factor=1.0,
    loss_logits=None,
    slices=None,
    stack="any",
    reserve_bytes=None,
):
    """One Candidate for `mesh` (a dict over AXES, or an (fsdp, tp, ep, pp)
    tuple) with a global batch of `global_tokens` tokens in sequences of
    `seq_len`.

    - `micro_batch_seqs`: sequences per microbatch (pipeline microbatch, or
      gradient-accumulation step) on each data-parallel rank.
    - `recompute`: a memory.RECOMPUTE policy; None picks, of none,
      selective and full (memory_plan.SEARCH_POLICIES), the one that fits
      with the shortest expected step (the first on a tie); if none fits,
      full.
    - `schedule`: gpipe, 1f1b, interleaved (`n_virtual` chunks per device,
      which must divide the layers per stage), zero_bubble, dualpipe.
    - `sequence_parallel`: with tp > 1, the norms and block inputs are split
      over tp too (Megatron's sequence parallelism).
    - `attention`: 'flash' (no s² probabilities kept; the backward
      recomputes them) or 'eager'.
    - `state_recipe`: bytes per parameter as named data
      (memory_plan.STATE_RECIPES; default 'bf16_master', 16 bytes;
      'megatron' is Megatron's 18); `zero` 0-3 over the data-parallel
      ranks (dp × cp, and ep for dense weights it does not shard); the fsdp
      axis is ZeRO-3 in itself.
    - `uneven_pipeline`: pp need not divide the layers (Llama 3: 126 on
      16); memory compares every stage (the first and last one layer
      short, with the embedding and the output layer), the bound takes the
      balanced average, the expectation the deepest stage.
    - `keep_gathered_weights`: FSDP gathers each weight once per step and
      keeps it instead of gathering it forward and backward for every
      microbatch (gradients are reduce-scattered per microbatch either way).
    - `ideal_overlap`: TP and EP collectives hide behind the math too
      (collective matmul); DualPipe hides EP by itself.
    - `dense_over_ep`: dense weights sharded over the expert axis as
      MaxText's rules do (False: replicated over ep and reduced over it).
    - `routing_node_limit`: each token reaches at most this many domains
      (DeepSeek-V3: 4), one copy per domain; `fp8_dispatch`: the
      dispatch-direction exchanges (the forward dispatch and the backward's
      activation gradients) in FP8 (1 byte per element), the combines in
      BF16 (moe.scale_out_exchange_bytes_per_token; deepseek2024v3).
    - `precision`: 'bf16', or 'fp8' matmuls (the bound at the FP8 peak,
      calibrate.fp8_peak_ratio; the expectation with
      calibrate.fp8_sustained_speedup); MFU stays over the BF16 peak.
    - `tp_comm_overlap`: TP collectives overlapped with the matmuls
      (Megatron's --tp-comm-overlap).
    - `grad_reduce_overlap`: False when the framework reduces the gradients
      only after the last backward (Megatron-LM before
      --overlap-grad-reduce): the expectation puts the dp reduction on the
      critical path; the bound hides it (some implementation overlaps it).
    - `capacity_factor`: an MoE layer that drops tokens computes every
      expert's capacity, capacity_factor times its share of the routed
      tokens, padded or not (MaxText without sparse_matmul, GShard): the
      routed experts' FLOPs scale by it, in the bound and the expectation.
    - `loss_logits`: what the loss keeps of the logits (memory.LOSS_LOGITS):
      'fp32_copy' (Megatron's FP32 softmax, 6 bytes per logit at the peak)
      or 'fused_bf16' (a loss XLA compiles: one BF16 buffer, the logits then their gradient, 2);
      None: the accelerator's usual stack's (calibrate.default_loss_logits:
      fused_bf16 on a TPU, as MaxText keeps them; fp32_copy on a GPU).
    - `reserve_bytes`: HBM held back for the framework's context,
      communication buffers and fragmentation, in [0, HBM); None: the
      family's (calibrate.memory_reserve_bytes). A mesh fits when the step
      keeps no more than HBM less the reserve.
    - `slices`: a TPU job cut into this many equal slices, the outer axes
      spanning them over DCN (None: one slice, or as few as the largest
      slice allows); MaxText's Multislice runs spread jobs that one slice
      could hold.
    - `stack`: the software stack family that will run it
      (calibrate.STACKS: 'megatron', 'pytorch', 'maxtext', 'deepspeed',
      'deepseek', or 'any'); it sets the band `expected_step_range_s`
      puts around the expectation, nothing else.
    """
    arguments = dict(locals())  # the arguments as they arrived: no other name is bound yet
    options = PlanOptions.of({name: value for name, value in arguments.items() if name in NAMES})
    return evaluate_plan(models.get(model), hardware.get(accelerator), mesh, global_tokens, options, n_devices)


def fitting_policies(m, acc, mesh, global_tokens, options, n_devices=None):
    """The recomputation policies under which evaluate_plan's plan fits
    (Candidate.fitting_policies from its memory count alone, without the
    timing: what the search compares to skip a schedule that holds no less
    and runs no faster)."""
    lay = layout_plan(m, acc, mesh, global_tokens, options, n_devices)
    return _fitting({policy: memory_plan.device_memory(lay, policy) for policy in recompute_policies(options)})


def recompute_policies(options):
    """The recomputation policies a plan is priced over: the one given, or
    every policy the search tries (memory_plan.SEARCH_POLICIES)."""
    if not isinstance(options, PlanOptions):
        raise TypeError(f"options: must be a PlanOptions, got {type(options).__name__}")
    return memory_plan.SEARCH_POLICIES if options.recompute is None else (options.recompute,)


def _fitting(held):
    """The policies of `held` ({policy: memory_plan.device_memory(...)}) under which the plan fits."""
    return tuple(policy for policy, (_, _, fits, _) in held.items() if fits)


def evaluate_plan(m, acc, mesh, global_tokens, options, n_devices=None):
    """`evaluate` for model `m` (a models.Model) and accelerator `acc` (a
    hardware.Accelerator), resolved once by the caller, under `options`, a
    PlanOptions with every field concrete: what the search calls, so that
    neither the names nor the keywords are looked up again per candidate."""
    lay = layout_plan(m, acc, mesh, global_tokens, options, n_devices)
    n_virtual, micro_batch_seqs = options.n_virtual, options.micro_batch_seqs
    schedule, state_recipe, attention = options.schedule, options.state_recipe, options.attention
    precision, stack = options.precision, options.stack
    uneven_pipeline, keep_gathered_weights = options.uneven_pipeline, options.keep_gathered_weights
    acc, mesh, pp = lay.accelerator, lay.mesh, lay.mesh["pp"]

    # memory: what the device that holds the most keeps, under each policy that may be chosen
    policies = recompute_policies(options)
    held = {policy: memory_plan.device_memory(lay, policy) for policy in policies}
    fits_under = _fitting(held)
    fitting = list(fits_under) or [policies[-1]]
    # the schedule's bubble and what stays exposed of each hidden collective do not depend on the policy
    overhead = memory_plan.bubble_overhead(lay.schedule, pp, math.ceil(lay.n_micro), n_virtual) if pp > 1 else 0.0
    hidden_bound, hidden, fractions = timing.hidden_terms(lay, bound=True), timing.hidden_terms(lay), None
    priced = {}
    for policy in fitting:
        # math: at peak for the bound; sustained, at the deepest stage's pace, for the expectation
        ideal_s, math_s, math_expected, elementwise_s = timing.math_s(lay, policy)
        # communication, at line rate and calibrated; the bubble of the schedule
        bound_terms = timing.communication_s(lay, policy, calibrated=False)
        expected_terms = timing.communication_s(lay, policy, calibrated=True)
        if fractions is None:
            fractions = timing.exposed_fractions(lay)
        step_s = timing.bound_step_s(math_s, bound_terms, hidden_bound, math_s * overhead)
        # FSDP's traffic against the math of each layer's forward and backward, not the step's
        uncovered = {"fsdp": timing.fsdp_uncovered_s(lay, policy, math_expected)}
        exposed = timing.exposed_s(math_expected, expected_terms, hidden, fractions, uncovered)
        expected_s = math_expected + math_expected * overhead + sum(exposed.values())
        priced[policy] = (expected_s, ideal_s, math_s, math_expected, elementwise_s, bound_terms, expected_terms,
                          step_s, exposed, uncovered)  # fmt: skip
    policy = fitting[0]
    for other in fitting[1:]:
        # the fastest that fits; a policy that reruns more is taken only when it is faster beyond rounding
        # (more math may hide more communication and tie the step exactly)
        if priced[other][0] < priced[policy][0] * (1 - 1e-9):
            policy = other
    (
        expected_s,
        ideal_s,
        math_s,
        math_expected,
        elementwise_s,
        bound_terms,
        expected_terms,
        step_s,
        exposed,
        uncovered,
    ) = priced[policy]
    breakdown, policy, fits, device = held[policy]
    state_keys = ("weights", "gradients", "master_weights", "optimizer_state")
    return Candidate(
        mesh["fsdp"],
        mesh["tp"],
        mesh["ep"],
        pp,
        sum(breakdown[k] for k in state_keys),
        fits,
        math_s,
        bound_terms["fsdp"],
        bound_terms["tp"],
        bound_terms["ep"],
        math_s * overhead,
        step_s,
        dp=mesh["dp"],
        cp=mesh["cp"],
        dp_s=bound_terms["dp"],
        cp_s=bound_terms["cp"],
        pp_s=bound_terms["pp"],
        activation_bytes_per_device=breakdown["activations"],
        recompute=policy,
        mfu=ideal_s / step_s,
        n_microbatches=lay.n_micro,
        placement=lay.placement,
        memory_breakdown=breakdown,
        hbm_bytes=float(calibrate.hbm_capacity_bytes(acc)),
        expected_step_s=expected_s,
        expected_mfu=ideal_s / expected_s,
        expected_terms=dict(
            expected_terms,
            math=math_expected,
            elementwise=elementwise_s,
            bubble=math_expected * overhead,
            grouped_gemm=timing.grouped_gemm_s(lay, policy),  # parts of math: the routed experts' small groups
            permute=timing.permute_s(lay, policy),  # and of elementwise: the sorts the exchanges add
            fp8_cast=timing.fp8_cast_s(lay, policy),  # and the casts of FP8 matmuls' inputs
        ),
        micro_batch_seqs=micro_batch_seqs,
        schedule=schedule,
        n_virtual=n_virtual,
        state_recipe=state_recipe,
        zero=lay.zero,
        attention=attention,
        precision=precision,
        memory_device=device,
        expected_exposed_s=exposed,
        expected_uncovered_s=uncovered,
        stack=calibrate.check_stack(stack),
        is_moe=lay.model.is_moe,
        eta_on_one_run_or_none=calibrate.eta_rests_on_one_run_or_none(acc),
        global_tokens=float(lay.global_tokens),
        uneven_pipeline=uneven_pipeline,
        keep_gathered_weights=keep_gathered_weights,
        fitting_policies=fits_under,
        seq_len=lay.seq_len,
    )


_validate.guard_module(globals())
