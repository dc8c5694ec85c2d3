"""Live pages stay true over their whole declared domains (issue 48).

Every chapter's live function (declared with ``ledger.live``) is read from
the chapter's source and run, with CPython, at the ends and the middle of
each input's domain (the others at their printed values) and at the corners
of the domains. At each point that evaluates, every glued claim the page
makes with those values (a comparison, "the largest", "compute-bound", a
count) is checked against the numbers it sits beside, as the reader reads
them. And the prose is held to one rule: a paragraph whose numbers change in
live mode glues no number that stays frozen, unless the number is listed
below as independent of the inputs, with the reason.

No build is needed: the functions are self-contained (they also run alone in
the reader's browser), so this runs in the fast tier."""

import ast
import inspect
import itertools
import math
import re
from pathlib import Path

import pytest

from shardbook import hardware, ledger, models, roofline

CHAPTERS = Path(__file__).resolve().parent.parent / "chapters"
_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```\s*$", re.S | re.M)
_GLUE = re.compile(r"\{glue(?::text)?\}`([a-z0-9_]+)`")


def _cells(markdown):
    for match in _CELL.finditer(markdown):
        source = match.group(1)
        if source.startswith("---\n"):  # a YAML header of cell options
            source = source.split("\n---\n", 1)[1]
        yield "\n".join(line for line in source.splitlines() if not re.match(r"^:[a-z-]+:", line))


def _declarations():
    """{chapter stem: (function, {input: spec}, {input: printed value})} for
    every ``ledger.live`` call in the chapters' code cells; the specs are
    evaluated with only the cost model in scope, as the browser would."""
    found = {}
    for path in sorted(CHAPTERS.glob("[0-9][0-9]_*.md")):
        for source in _cells(path.read_text()):
            if "ledger.live" not in source:  # parse only the cells that may declare one (collection runs this)
                continue
            tree = ast.parse(source)
            defs = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "ledger.live"):
                    continue
                name = node.args[0].id
                namespace = {}
                exec(ast.get_source_segment(source, defs[name]), namespace)  # noqa: S102 (the book's own source)
                function = namespace[name]
                scope = {"ledger": ledger, "hardware": hardware, "models": models}
                specs = {kw.arg: eval(ast.unparse(kw.value), scope) for kw in node.keywords}  # noqa: S307
                defaults = {n: p.default for n, p in inspect.signature(function).parameters.items()}
                assert path.stem not in found, f"{path.stem}: more than one live function"
                found[path.stem] = (function, specs, defaults)
    return found


DECLARATIONS = _declarations()


def _middle(spec):
    """The middle of a numeric domain; for whole numbers, rounded down to a
    multiple of the largest number dividing both ends (the middle of 8 and
    2**26 is then a multiple of 8, as a token count split eight ways must be)."""
    low, high = spec["minimum"], spec["maximum"]
    if spec["kind"] == "number":
        return (low + high) / 2
    step = math.gcd(low, high) or 1
    return max(low, (low + high) // 2 // step * step)


def _one_at_a_time(specs, defaults):
    """Each input at its domain's ends and middle (every option of a choice),
    the others at their printed values."""
    for name, spec in specs.items():
        values = spec["options"] if spec["kind"] == "choice" else [spec["minimum"], _middle(spec), spec["maximum"]]
        for value in values:
            yield {**defaults, name: value}


def _corners(specs, defaults):
    numeric = [n for n, s in specs.items() if s["kind"] != "choice"]
    for combo in itertools.product(*[(specs[n]["minimum"], specs[n]["maximum"]) for n in numeric]):
        yield {**defaults, **dict(zip(numeric, combo, strict=True))}


def _evaluate(function, specs, arguments):
    """(raw results, their texts as the page shows them)."""
    checked = {name: ledger.check_input(specs[name], value) for name, value in arguments.items()}
    results = function(**checked)
    return results, ledger.evaluate_live(function, checked)


# --- the claims each page glues, checked against the numbers beside them -------------
# Each takes (args, n, t): the inputs, the numbers as shown (parsed back from
# the page's text, so a claim is held to what the reader reads) and the texts;
# it returns the claims that fail, in words.


def _shown(text):
    """The number a live value's text shows: "1,238" -> 1238.0, "11.1 %" -> 11.1."""
    match = re.match(r"^-?[\d,]*\.?\d+(?:[eE][+-]?\d+)?", text)
    assert match, f"no number in {text!r}"
    return float(match.group(0).replace(",", ""))


def _close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def _claims_00(args, n, t):
    bad = []
    if t["intro_model_name"] != args["model"]:
        bad.append("the sentence names another model than the one chosen")
    # "whose weights take W GB at b bytes per parameter": W = parameters x b (the text rounds)
    # (whole GB shown, parameters to two decimals of a billion)
    if abs(n["intro_weights_gb"] - n["intro_params"] * args["bytes_per_param"]) > 0.5 + 0.005 * args["bytes_per_param"]:
        bad.append("the weights' size is not the parameters times the bytes per parameter")
    return bad


def _claims_01(args, n, t):
    mi = hardware.get("MI355X")
    bad = []
    if n["topo_ag_across_n"] != args["n_nodes"] * mi.scale_up_domain_size:
        bad.append("the GPU count is not eight per node")
    peers = mi.scale_up_domain_size - 1
    if not _close(n["topo_ag_ring_ms"] / n["topo_ag_inside_ms"], peers, 0.05):
        bad.append("'seven times less': the one-ring and full-mesh times are not the peer count apart")
    if not n["topo_ag_across_serial_ms"] >= n["topo_ag_across_ms"]:
        bad.append("the phases run one after the other take less than pipelined")
    if not n["topo_ag_across_ring_ms"] > n["topo_ag_across_ms"]:
        bad.append("the ring through one rail per node is not the slower")
    if not n["topo_ag_across_flat_ms"] > n["topo_ag_inside_ms"]:
        bad.append("'the NICs, not xGMI, set the time': the flat rings are no slower than the node alone")
    return bad


def _claims_02(args, n, t):
    bad = []
    ag8, ag_n, v_w = n["shard_ag_8_ms"], n["shard_ag_64_ms"], n["shard_v_over_w_ms"]
    if args["n_large"] <= 8:
        bad.append("the 'large' group is not larger than eight")
    if not (ag8 <= ag_n <= v_w and ag_n <= 1.15 * ag8):
        bad.append("'growing the group barely changes the time' fails")
    if not (ag8 >= 0.85 * v_w and ag_n >= 0.85 * v_w):
        bad.append("'both close to V/W' fails")
    if not n["shard_ag_8_fabric_ms"] < ag8:
        bad.append("the board's fabric is not faster than one ring")
    return bad


def _claims_03(args, n, t):
    v5p, h100 = hardware.get("TPU v5p"), hardware.get("H100")
    one_axis = roofline.dp_min_tokens_per_device(v5p.bf16_dense_flops_per_s, v5p.collective_bytes_per_s)
    whole = roofline.dp_min_tokens_per_device(990e12, h100.domain_egress_bytes_per_s)
    bad = []
    if not _close(n["dp_v5p_three_axes"], one_axis / args["n_axes"], 0.01):
        bad.append("the threshold over several axes is not the one-axis one divided by their number")
    r = args["n_replicas"]
    if not _close(n["dp_h100_two_domains"], whole * (r - 1) / r, 0.01):
        bad.append("the small-group floor is not (R-1)/R of the whole")
    if not _close(n["dp_moe_k4_e128"], whole * args["n_experts"] / args["top_k"], 0.01):
        bad.append("'the floor rises by E/k' fails")
    return bad


def _claims_04(args, n, t):
    bad = []
    if not n["tp_sp_act_local_mb"] < n["tp_sp_act_full_mb"]:
        bad.append("'shrinks to' fails: the split activation is not smaller")
    if not _close(n["tp_sp_act_local_mb"] * args["p"], n["tp_sp_act_full_mb"], 0.5 / max(n["tp_sp_act_local_mb"], 1)):
        bad.append("'that is 1/p of those activations' fails")
    return bad


def _claims_05(args, n, t):
    bad = []
    if n["ep_tokens_rank"] * 8 != n["ep_tokens_global"]:
        bad.append("the rank's tokens are not an eighth of the update's")
    width = models.get("Mixtral 8x22B").d_model
    if n["ep_routed_bytes"] != n["ep_tokens_rank"] * args["top_k"] * width * 2:
        bad.append("the routed payload is not tokens x k x D x 2 bytes")
    return bad


def _claims_06(args, n, t):
    bad = []
    if t["pp_sim_1f1b"] != t["pp_sim_gpipe"]:
        bad.append("'the idle share is the same' (1F1B and GPipe) fails")
    if not n["pp_sim_interleaved"] < n["pp_sim_1f1b"]:
        bad.append("'the idle share falls' with interleaving fails")
    if not _close(n["pp_sim_gpipe"], n["pp_formula"], 0.02) or not _close(
        n["pp_sim_interleaved"], n["pp_formula_v2"], 0.05
    ):
        bad.append("a simulated share is not the formula's")
    if not _close(n["pp_sim_zero_bubble"], n["pp_zb_h1"], 0.05):
        bad.append("zero bubble's simulated share is not the closed form's")

    # idle over the same useful work, from shares shown to a tenth of a percent (half of it either way)
    def idle(share):
        return share / (100 - share)

    zb, one = n["pp_sim_zero_bubble"], n["pp_sim_1f1b"]
    low, high = idle(max(zb - 0.05, 0)) / idle(one + 0.05), idle(zb + 0.05) / idle(max(one - 0.05, 1e-9))
    if not low * 0.95 <= 1 / 3 <= high * 1.05:
        bad.append("'a third of 1F1B's idle time' fails")
    return bad


def _claims_07(args, n, t):
    pod = hardware.get("Ironwood").scale_up_domain_size
    bad = []
    if (t["mesh_iw_slice"] == "a full Ironwood pod") != (args["n_chips"] == pod):
        bad.append(f"the slice is called {t['mesh_iw_slice']!r} at {args['n_chips']} chips of a {pod:.0f}-chip pod")
    if n["mesh_iw_max_chips"] > pod:
        bad.append("the largest slice has more chips than a pod")
    whole_pod = t["mesh_iw_largest_sentence"].startswith("This batch stays compute-bound even on a whole pod")
    if whole_pod != (n["mesh_iw_max_chips"] == pod):
        bad.append("the largest-slice sentence does not match its chip count")
    ratio = n["mesh_iw_ratio"]
    compute_bound = t["mesh_iw_bound_sentence"] == "the step is compute-bound"
    if compute_bound != (ratio >= 1):
        bad.append(f"{t['mesh_iw_bound_sentence']!r} beside math {t['mesh_iw_ratio']} of communication")
    if compute_bound != (args["n_chips"] <= n["mesh_iw_max_chips"] or whole_pod):
        bad.append("compute-bound on a slice larger than the largest compute-bound slice, or the reverse")
    factors = {"slightly": (1, 1.5), "about a factor of two": (1.5, 2.5), "about a factor of three": (2.5, 3.5)}
    for words, (low, high) in factors.items():
        if words in t["mesh_iw_bound_sentence"] and not low <= 1 / ratio <= high + 0.05:
            bad.append(f"{t['mesh_iw_bound_sentence']!r} beside a ratio of {t['mesh_iw_ratio']}")
    if not _close(
        n["mesh_iw_tokens_per_chip"], args["batch_tokens"] / args["n_chips"], 0.01 + 0.5 / n["mesh_iw_tokens_per_chip"]
    ):
        bad.append("the tokens per chip are not the batch over the chips")
    if n["mesh_iw_batch"] != args["batch_tokens"] or n["mesh_iw_pod"] != args["n_chips"]:
        bad.append("the sentence names other inputs than the chosen ones")
    return bad


def _claims_09(args, n, t):
    bad = []
    if n["nodes_n_gpus"] != 8 * args["n_nodes"]:
        bad.append("the GPU count is not eight per node")
    micro = n["nodes_hsdp_n_micro"]
    words = t["nodes_hsdp_runs"]
    if (words == "microbatch a step") != (micro == 1) or ("on average" in words) != (not float(micro).is_integer()):
        bad.append(f"'{t['nodes_hsdp_n_micro']} {words}'")
    if not _close(micro, 2**20 / (n["nodes_n_gpus"] * 4096), 0.01):
        bad.append("the microbatches per GPU are not the batch's sequences over the GPUs")
    if (t["nodes_hsdp_nic_verdict"] == "fewer") != (n["nodes_hsdp_nic_ratio"] > 1):
        bad.append(f"HSDP sends {t['nodes_hsdp_nic_verdict']!r} bytes beside a ratio of {t['nodes_hsdp_nic_ratio']}")
    if not n["nodes_flat_ring_factor"] >= 1:
        bad.append("'times more here': the flat rings send less than the two-level schedule")
    flat, hsdp = n["nodes_flat_expected_s"], n["nodes_hsdp_expected_s"]
    verdict = t["nodes_hsdp_step_verdict_sentence"]
    same = verdict.startswith("the same step time")
    if same != _close(flat, hsdp, 0.02 + 0.005 / min(flat, hsdp)):
        bad.append(f"{verdict!r} beside {t['nodes_flat_expected_s']} and {t['nodes_hsdp_expected_s']}")
    if verdict == "HSDP to be faster" and not hsdp < flat:
        bad.append("HSDP called faster but not shown faster")
    if verdict == "flat FSDP to be faster" and not flat < hsdp:
        bad.append("flat FSDP called faster but not shown faster")
    if ("trade, not a winner" in t["nodes_hsdp_trade_sentence"]) != same:
        bad.append("'a trade, not a winner' beside a faster layout")
    return bad


CLAIMS = {
    "00_introduction": _claims_00,
    "01_topology": _claims_01,
    "02_sharding": _claims_02,
    "03_data_parallel": _claims_03,
    "04_tensor_parallel": _claims_04,
    "05_expert_parallel": _claims_05,
    "06_pipeline": _claims_06,
    "07_choosing_a_mesh": _claims_07,
    "09_many_nodes": _claims_09,
}

# Numbers glued in a live paragraph that do not depend on the page's inputs,
# with the reason each stays as printed.
FIXED = {
    "01_topology": {
        "topo_mi_peers": "an MI355X's peer links, a property of the board",
        "topo_mi_n": "the GPUs of one MI355X node",
        "topo_mi_rail": "the board's PCIe and NIC rates",
        "topo_mi_rail_share": "the board's rail over one xGMI link",
    },
    "03_data_parallel": {
        "dp_v5p_one_axis": "v5p's threshold along one axis, a constant the live value is compared with",
        "dp_v5p_one_axis_book": "the Scaling Book's published figure",
        "dp_v5p_three_axes_book": "the Scaling Book's published figure",
        "dp_h100_nodes": "the GPU chapter's published figure for whole nodes",
        "dp_h100_nodes_preset": "the same with the preset's FLOP/s",
        "dp_moe_ds_factor": "DeepSeek-V3's E/k, a property of the model",
    },
    "05_expert_parallel": {"ep_d": "Mixtral 8x22B's width, the model the paragraph prices"},
    "07_choosing_a_mesh": {"mesh_iw_threshold": "Ironwood's FSDP + TP threshold, independent of batch and chips"},
    "09_many_nodes": {
        "nodes_m8_params": "LLaMA-3 8B's parameter count",
        "nodes_hsdp_tokens": "the batch, which live mode does not change",
        "nodes_hsdp_seq": "the sequence length, which live mode does not change",
        "nodes_printed_nodes": "the printed table's nodes, named as such",
        "nodes_70b_hsdp_state": "LLaMA-3 70B's state over eight GPUs",
        "nodes_h100_hbm": "an H100's memory",
    },
}


def _displayed_zero(text):
    """True if a value's text shows only zeros ("0.00 ms", "0 MB")."""
    digits = re.sub(r"[^0-9]", "", text.split(" ")[0])
    return bool(digits) and set(digits) == {"0"}


def _check_point(stem, arguments):
    function, specs, _ = DECLARATIONS[stem]
    results, texts = _evaluate(function, specs, arguments)
    bad = []
    numbers = {}
    for name, result in results.items():
        if "phrase" in result:
            continue
        if not math.isfinite(result["value"]):
            bad.append(f"{name} is not finite")
            continue
        numbers[name] = _shown(texts[name])
        if result["value"] != 0 and _displayed_zero(texts[name]):
            bad.append(f"{name} is {result['value']!r} but shows {texts[name]!r}")
    bad += CLAIMS[stem](arguments, numbers, texts)
    return bad


def test_every_live_page_has_its_claims_checked():
    """A new live page needs its claims here (and its frozen numbers, if any)."""
    assert set(DECLARATIONS) == set(CLAIMS), f"live pages without claims: {sorted(set(DECLARATIONS) - set(CLAIMS))}"
    assert set(FIXED) <= set(DECLARATIONS)


@pytest.mark.parametrize("stem", sorted(DECLARATIONS))
def test_live_claims_hold_at_the_ends_and_middle_of_every_domain(stem):
    """Each input at its domain's ends and middle (the others printed): the
    function evaluates (no refusal: the domain is where the prose makes
    sense), no nonzero value shows as zero, and no glued claim contradicts
    the numbers beside it."""
    _, specs, defaults = DECLARATIONS[stem]
    failures = []
    for arguments in _one_at_a_time(specs, defaults):
        try:
            failures += [f"{arguments}: {b}" for b in _check_point(stem, arguments)]
        except ValueError as err:
            failures.append(f"{arguments}: refused inside the domain ({err})")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("stem", sorted(DECLARATIONS))
def test_live_claims_hold_at_the_corners_of_the_domains(stem):
    """Every input at an end of its domain at once: the cost model may refuse a
    combination only it can judge (a split that does not divide), in one line
    naming what it refused; otherwise the claims hold as above."""
    _, specs, defaults = DECLARATIONS[stem]
    failures = []
    for arguments in _corners(specs, defaults):
        try:
            failures += [f"{arguments}: {b}" for b in _check_point(stem, arguments)]
        except ValueError as err:
            message = str(err)
            if "\n" in message or not re.match(r"^[A-Za-z_][\w ×]*:", message):
                failures.append(f"{arguments}: refused without a one-line message naming the argument: {message!r}")
    assert not failures, "\n".join(failures)


def _prose_paragraphs(markdown):
    """Paragraphs and list items of the chapter's prose (code cells blanked)."""
    prose = _CELL.sub(lambda m: "\n" * m.group(0).count("\n"), markdown)
    return [block for block in re.split(r"\n\s*\n|\n(?=\s*- )", prose) if block.strip()]


@pytest.mark.parametrize("stem", sorted(DECLARATIONS))
def test_a_live_paragraph_glues_no_frozen_number_unless_it_is_fixed(stem):
    """A paragraph whose numbers change in live mode may glue a number that
    does not only if that number is listed in FIXED with its reason (it does
    not depend on the inputs); each FIXED entry is still used so."""
    function, _, defaults = DECLARATIONS[stem]
    live = set(function(**defaults))
    fixed = FIXED.get(stem, {})
    frozen, used = [], set()
    for paragraph in _prose_paragraphs((CHAPTERS / f"{stem}.md").read_text()):
        keys = _GLUE.findall(paragraph)
        if live & set(keys):
            for key in keys:
                if key in fixed:
                    used.add(key)
                elif key not in live:
                    frozen.append(f"{key} in: {' '.join(paragraph.split())[:120]}...")
    assert not frozen, "frozen numbers beside live ones:\n" + "\n".join(frozen)
    assert used == set(fixed), f"FIXED entries no live paragraph uses: {sorted(set(fixed) - used)}"


def test_a_claim_contradicting_its_numbers_is_caught():
    """The check fails where it should: chapter 7's sentence with a wording
    its ratio contradicts, and chapter 9's with a microbatch count that is
    not the batch's share."""
    pod = hardware.get("Ironwood").scale_up_domain_size
    args = {"batch_tokens": 4_194_304, "n_chips": int(pod)}
    numbers = {
        "mesh_iw_ratio": 0.44,
        "mesh_iw_max_chips": 1808,
        "mesh_iw_tokens_per_chip": 455,
        "mesh_iw_batch": 4_194_304,
        "mesh_iw_pod": pod,
    }
    texts = {
        "mesh_iw_slice": "a full Ironwood pod",
        "mesh_iw_bound_sentence": "the step is compute-bound",
        "mesh_iw_ratio": "0.44",
        "mesh_iw_largest_sentence": "The largest slice on which this batch stays compute-bound has about",
    }
    assert any("compute-bound" in b for b in _claims_07(args, numbers, texts))
    texts["mesh_iw_slice"] = "an Ironwood slice smaller than a pod"
    assert any("slice is called" in b for b in _claims_07(args, numbers, texts))
    numbers9 = {
        "nodes_n_gpus": 256,
        "nodes_hsdp_n_micro": 8,
        "nodes_hsdp_nic_ratio": 1.5,
        "nodes_flat_ring_factor": 1.03,
        "nodes_flat_expected_s": 0.47,
        "nodes_hsdp_expected_s": 0.47,
    }
    texts9 = {
        "nodes_hsdp_runs": "microbatches a step",
        "nodes_hsdp_n_micro": "8",
        "nodes_hsdp_nic_verdict": "fewer",
        "nodes_hsdp_nic_ratio": "1.5",
        "nodes_hsdp_step_verdict_sentence": "the same step time for both",
        "nodes_flat_expected_s": "0.47 s",
        "nodes_hsdp_expected_s": "0.47 s",
        "nodes_hsdp_trade_sentence": "What the numbers support is therefore a trade, not a winner",
    }
    assert _claims_09({"n_nodes": 32}, numbers9, texts9) == [
        "the microbatches per GPU are not the batch's sequences over the GPUs"
    ]
    assert _displayed_zero("0.00 ms") and _displayed_zero("0 MB") and not _displayed_zero("0.01 ms")


@pytest.mark.parametrize(
    "text,figure",
    [("37 s", True), ("2,284 ms", True), ("1.2 TB/s", True), ("96", True), ("8.3 %", True), ("1.7×", True),
     ("−0.25", True), ("1.04 TFLOP/s", True), ("12.6 days", True),
     ("ep 8, then fsdp 2 × ep 4", False), ("fits, as it must", False), ("v5p:2x2x2", False), ("3 of 4", False),
     ("TFLOP/s", False), ("", False)],
)  # fmt: skip
def test_a_figure_is_a_number_with_at_most_a_short_unit(text, figure):
    # the page keeps a figure on one line (class glue-figure); a phrase wraps with its paragraph
    from shardbook.book.live_assets import is_figure_text

    assert is_figure_text(text) is figure
