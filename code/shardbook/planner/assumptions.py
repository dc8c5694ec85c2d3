"""The assumptions the planner states on every result (the command line
prints them; chapters show them): what each step of the planner counts and
how. Kept apart from the package's __init__ so that the command line can
read them without importing the package that imports it."""

from .calibrate import exposed_fraction

ASSUMPTIONS = f"""\
- two step times: the bound (`step_s`, `mfu`) takes peak FLOP/s (the FP8
  peak for precision='fp8'), collectives at line rate with no latency,
  all-reduce inside an NVSwitch domain with NVLink SHARP (H100, H200,
  B200, GB200/GB300 NVL72; not H800; an accelerator file's [calibration]
  says whether its own does) as the cheaper of in-switch reduction ((n+1)/n
  of the buffer each way) and the ring, and every
  overlappable collective hidden (TP's and EP's only with ideal_overlap,
  TP's also with tp_comm_overlap, EP's also under DualPipe with a
  pipeline and where the stack is taken to overlap them,
  calibrate.EP_EXPOSED_FRACTION); no run under
  the same options may beat
  it, and the validation appendix holds every published run to the
  ideal_overlap bound. The
  expectation (`expected_step_s`, `expected_mfu`) divides the math by a
  sustained efficiency per accelerator (and, in FP8, by a fitted FP8
  speedup of the matmuls), the attention scores on Hopper by the share of
  it their kernel sustains (--stack: FlashAttention-2 for PyTorch, DeepSpeed
  or none named, cuDNN's for Megatron, MaxText and DeepSeek;
  calibrate.attention_share), adds the work between the matmuls
  at the achieved HBM bandwidth (calibrate.ELEMENTWISE_PASSES times the
  least traffic of what a layer keeps), prices collectives at achieved
  bandwidths with a latency per ring step (per peer message for
  all-to-all), across GPU nodes as NCCL runs them (flat rings: (n-1)/n
  of the buffer through a node's NICs, where the bound takes the
  two-level (k-1)/k of k nodes), and leaves exposed what no math can
  cover of each hidden collective: FSDP's first gather and last
  reduce-scatter of one layer, or more where a layer's backward gather
  and gradient reduce-scatter outlast the layer's backward math (its
  forward gather the forward's), the gradient reduction's last bucket
  (Megatron-Core's default size),
  the pipeline's sends in full unless the schedule overlaps them
  (interleaved, DualPipe: then those of the fill and drain), and a fixed
  share of the rest: {exposed_fraction("tp_overlapped"):.0%} of an overlapped TP collective's
  (provisional), {exposed_fraction("ep_overlapped"):.0%} of an overlapped EP exchange's and
  {exposed_fraction("cp"):.0%} of context parallelism's (both assumed) (planner.calibrate: each figure
  sourced, fitted or marked assumed, none per run; an accelerator file
  gives its own in a [calibration] table, else the defaults); the search
  ranks fitting meshes by it;
- the batch: every data-parallel rank (dp × fsdp × ep of them) gets at
  least one microbatch, and the step is priced at the average share; a
  share that is not a whole number of microbatches is priced as if it
  ran, although a framework needs the batch to divide, and such a mesh
  ranks after every fitting mesh whose batch divides (and before the meshes
  that do not fit);
- the search: unless fixed, per mesh the microbatch size, the schedule
  (1F1B, interleaving at every virtual-stage count, ZB-H1, DualPipe on an
  even pipeline; GPipe, which 1F1B never trails, only when named), an
  uneven pipeline where pp does not divide the layers, FSDP's weights kept
  gathered or not, FP8 with precision 'auto', and the fastest of none,
  selective and full recomputation that fits; under a budget of
  candidates priced (a count, so the same inputs give the same table)
  every mesh is priced under its base variants (ZB-H1 or 1F1B, weights
  gathered again) and as many as the budget allows under all, which the
  output says;
- math: model FLOPs 6·N_active + 6·L·H·Q·s per token (the causal half of
  the attention scores, as MaxText counts them), plus what the
  recomputation policy runs again (a flash kernel's recomputation inside
  its own backward is not counted); MFU = model FLOPs at the BF16 peak /
  step time; each microbatch streams the device's weights from HBM three
  times, so the math takes at least that long at the HBM bandwidth (spec
  for the bound, an achieved fraction for the expectation);
- axes are placed innermost first (default tp, ep, cp, fsdp, dp, pp): a
  group sits inside one scale-up domain while the product of the inner axes
  and its degree fits in one, otherwise it spans domains and its members
  share their NICs (or DCN); a TPU job is cut into slices no larger than
  the largest one granted (v5p: 6,144 chips), or into `slices` equal
  ones, each axis takes torus dimensions of the slice (two links per
  wrapped dimension, one without), and what does not fit spans slices over
  DCN; on several slices the loss the expectation puts on spreading is
  optimistic: it prices the DCN transfers, but MaxText's published
  multislice runs lost more than those explain, more the more slices
  (appendix "The planner against published runs");
- FSDP gathers weights (BF16, in FP8 plans too, though fp8_param_gather
  gathers the FP8 weights) forward and backward for every microbatch
  (once per step with keep_gathered_weights) and reduce-scatters each
  microbatch's gradients; on TPUs as the compiler emits them (chapter 97's
  compiled plans): the gradients all-reduced (twice the traffic) on v5p, v5e
  and v6e, and the gathers all-reduces too where FSDP alone spans a whole 3D
  slice that wraps (v5p, Ironwood); dense weights are sharded over ep as MaxText does
  (dense_over_ep; else replicated and reduced over ep); gradients of weights
  replicated over dp and cp (and ep) are all-reduced once per step (ZeRO-1:
  reduce-scatter and all-gather; ZeRO-2: a reduce-scatter per microbatch);
  context parallelism gathers K and V and reduce-scatters their gradients
  per layer; these and the pipeline's stage-to-stage sends hide behind the
  math (the expectation exposes the gradient reduction in full when
  grad_reduce_overlap is False). TP (4 all-reduce equivalents of the
  block's activations per layer, 6 with full recomputation, each a
  reduce-scatter and an all-gather with sequence parallelism, which NVLink
  SHARP does not speed up; K and V replicated beyond the KV heads) and EP (dispatch and combine, forward and
  backward, and the forward's pair again where the policy recomputes the MoE block: full and every
  named-tensor policy, MaxText's and torchtitan's op-level SAC; optionally node-limited and with FP8 dispatch) sit on the
  critical path unless tp_comm_overlap or ideal_overlap (collective matmul)
  overlaps TP, and ideal_overlap or DualPipe overlaps EP (the bound hides
  them then; the expectation leaves the shares above exposed). PP adds its schedule's
  bubble (pipeline.schedule_bubble_overhead: GPipe and 1F1B (p-1)/m,
  interleaved (p-1)/(v·m), ZB-H1 (p-1)/(3m), DualPipe (p-2)/(3m)); the
  bound runs every stage at the average depth, the expectation at the
  deepest stage's, both by layer count (the output layer's matmul, which
  runs on the last stage, is spread over the stages there);
- memory per device, on the device that holds the most (every stage
  compared): the state recipe's bytes per parameter (memory.STATE_RECIPES;
  default bf16_master, 16; megatron 18; fp32 16; pure_bf16 8; or a
  memory.StateRecipe; in FP8 under megatron or bf16_master the layers'
  weights as Megatron Bridge's FP8 recipes hold them (fp8_param_gather: 1
  byte and a 1-byte transpose where the GEMM takes only TN, so 2 on Hopper
  and 1 on Blackwell, memory.te_fp8_weight_bytes; Megatron-LM without
  --fp8-param-gather would keep the BF16 weights and a cached FP8 copy, 2
  more, which is not counted); the gradients in the recipe's dtype in FP8
  too, as Transformer Engine writes them into main_grad)
  over fsdp (ZeRO-3), tp, ep (experts, and dense
  weights with dense_over_ep) and ZeRO-`zero` over the data-parallel
  ranks, for the stage's own layers (an uneven pipeline takes the missing
  layers from the first stage's first chunk and the last stage's last
  chunk, as Llama 3 does), the input embedding on the first stage and the
  output layer (final norm and projection; with tied embeddings and pp > 1
  a copy of the table, as Megatron-LM keeps one) on the last, both
  vocabulary-parallel over tp; DualPipe's device i runs stages i and p−1−i
  (device 0 holds both ends): their weights and gradients each, the master
  weights and optimizer state of half the pair's (DeepSeek-V3's MTP module
  is not counted); activations (memory.activation_bytes_per_layer: flash
  attention keeps no s² probabilities; sequence parallelism with tp > 1;
  what a remat policy offloads to the host is not in HBM; in FP8 what
  Transformer Engine saves in one byte, the inputs of the attention's QKV
  and a dense MLP's first matmul, of the MLP's last and the dispatched
  tokens, the rest BF16, memory.TE_FP8_SAVED_BYTES; a MaxText policy's and
  DeepSeek-V3's recipe as they say) of the stage's
  layers for the microbatches its schedule keeps in flight
  (pipeline.stage_activation_layer_microbatches: 1F1B p−s on stage s
  (at most m), ZB-H1 p on every stage (at most m), interleaved its warm-up plus one chunk, GPipe all;
  DualPipe p + 1 of the deepest stage on every device; an MoE model's
  dense first layers: the exact sum over the model with pp = 1, every
  layer at the larger kind with pp > 1,
  memory.activation_bytes_per_stage_layer); the logits of one microbatch
  on the last stage (under DualPipe on device 0, which runs the last stage
  too), as the loss keeps them (loss_logits: Megatron's FP32 copy, 6 bytes
  per logit at the peak, the default on a GPU, or an XLA-compiled loss's
  BF16 logits with their gradient written over them, 2, the default on a
  TPU); under recomputation, the one layer being recomputed, beyond the
  logits (their phases do not overlap: Korthikanti's extra layer); on a TPU
  with more than one microbatch, a second gradient buffer (JAX's scan
  holds the sum and the microbatch's gradient); FSDP's gather buffers (two
  of the device's mean transformer layer, or every weight it holds when
  kept; the layers' in their FP8 bytes in an FP8 plan) and, once the
  layers' backward is done, the embedding's gradient
  formed whole and reduced (two tables' worth, where that exceeds the
  activations then freed);
  a reserve for the framework's context, communication buffers and
  fragmentation (calibrate.MEMORY_RESERVE_BYTES: the most, in half
  gigabytes, that no published run that ran contradicts, per family;
  reserve_bytes); headroom is what is left of the HBM the device reports
  (calibrate.hbm_capacity_bytes: NVML's total for A100, H100, H800, H200,
  or an accelerator file's calibration; else the datasheet);
- the band: the expected step's range from the leave-one-source-out
  errors of the plan's stack family on dense runs, or of every MoE run
  (calibrate.STEP_BANDS, tenth to ninetieth percentile); rows whose band
  overlaps the best's are ties.
"""
