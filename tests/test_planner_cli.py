"""Issue 33, items 3-5: the planner's command line on a reader's own model
(a Hugging Face config.json) and accelerator (an accelerator file), the batch
in tokens or sequences, --explain and --json; bad input is one line naming
the field and the rule, exit code 2. The planner page's entry
(planner.page.plan) answers the same way."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_main
from shardbook import accelerator_file, explorer, models
from shardbook.planner import calibrate, cli, inputs, page

CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def table_rows(out):
    """The planner's table in `out` as a list of {header: cell} (columns cut where the dashed line under
    the header cuts them; the header of the tie column is empty)."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("mesh"))
    spans, start = [], 0
    for dashes in lines[at + 1].split("  "):
        spans.append((start, start + len(dashes)))
        start += len(dashes) + 2
    names = [lines[at][a:b].strip() for a, b in spans]
    rows = []
    for line in lines[at + 2 :]:
        if not line.strip():
            break
        rows.append({name: line[a:b].strip() for name, (a, b) in zip(names, spans, strict=True)})
    return rows


def _cli(*args):
    """`python -m shardbook.explorer ARGS` (its exit status, stdout and stderr), run in this process
    (conftest.run_main); test_the_entry_point_gives_mains_status_and_streams starts Python."""
    return run_main(explorer.main, *args)


def _refused(result, message):
    assert result.returncode == 2, result.stdout
    assert result.stderr.startswith("error: " + message), result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_batch_in_tokens_with_suffixes_or_in_sequences():
    assert inputs.parse_count("tokens", "4M") == 4_194_304 == inputs.parse_count("tokens", "4194304")
    assert inputs.parse_count("tokens", "1.5K") == 1536
    assert inputs.batch_tokens("4096", tokens="4M") == inputs.batch_tokens(4096, seqs="1024") == 4_194_304
    for bad, rule in (("-4M", "must be a whole number >= 1"), ("2.5", "must be a whole number >= 1"),
                      ("0", "must be a whole number >= 1"), ("4X", "must be a whole number (digits")):  # fmt: skip
        with pytest.raises(ValueError, match=f"tokens: {rule}".replace("(", "\\(")):
            inputs.parse_count("tokens", bad)
    with pytest.raises(ValueError, match="tokens: 1,000,000 is not a whole number of sequences of 4,096"):
        inputs.batch_tokens(4096, tokens="1000000")


@pytest.mark.slow  # default searches by the command line, once per way of naming the config: seconds of one core (make test runs it)
def test_a_config_in_the_model_position_or_with_config_gives_the_same_table():
    path = str(CONFIGS / "qwen3-30b-a3b.json")
    # the schedule and the weights fixed, so that no part of the search depends on the time it is given
    fixed = ("--schedule", "1f1b", "--no-keep-gathered-weights")
    by_flag = _cli("--config", path, "H100", "64", "--batch-seqs", "512", "--top", "3", *fixed)
    in_place = _cli(path, "H100", "64", "2M", "--top", "3", *fixed)
    assert by_flag.returncode == 0 and in_place.returncode == 0, by_flag.stderr + in_place.stderr
    assert by_flag.stdout == in_place.stdout
    lines = by_flag.stdout.splitlines()
    # the count read from the config beside the published one (qwen2025qwen3: 30.5B total, 3.3B active)
    assert (
        "30.53 B parameters (3.35 B active per token); the shapes of Qwen3-30B-A3B, published: 30.50 B [qwen2025qwen3]"
        in lines[1]
    )
    assert "2,097,152 tokens per step (512 sequences of 4,096)" in lines[0]
    header = next(line for line in lines if line.startswith("mesh"))
    assert "expected step ms" in header and "bound step ms" in header and "memory+reserve / HBM GB" in header


@pytest.mark.parametrize("name", [p.name for p in sorted(CONFIGS.glob("*.json"))])
def test_every_family_prints_its_count_and_a_published_size_where_one_is_known(name):
    m = inputs.read_model(str(CONFIGS / name))
    line = inputs.model_line(m)
    assert f"{models.param_count(m) / 1e9:,.2f} B parameters" in line
    found = inputs.published_size(m)
    if name.startswith("gemma"):  # the Gemma reports publish non-embedding counts only
        assert found is None
        return
    release, total, source = found
    # the same tolerance tests/test_hf_config.py holds the count to: within one unit of the last printed digit
    assert abs(models.param_count(m) - total) <= max(0.1e9, 0.005 * total), (name, release, source)


def test_an_accelerator_file_in_place_of_a_preset(tmp_path):
    path = tmp_path / "my-h100.toml"
    path.write_text(accelerator_file.to_toml("H100").replace('name = "H100"', 'name = "My H100"'))
    # one microbatch size, so that the search's choice by expected time does not move the memory;
    # TP without sequence parallelism all-reduces, which NVLink SHARP speeds up on the preset
    # (with it TP reduce-scatters and all-gathers, which pay the ring on both)
    # the schedule and FSDP's weights fixed too: the search picks among them by the calibrated time; no dp
    # axis, whose replicated state fits without recomputation in 85.5 GB but not in 80
    opts = ("--top", "100", "--micro-batch", "1", "--no-sequence-parallel", "--schedule", "1f1b",
            "--no-keep-gathered-weights", "--axes", "fsdp,tp,ep,pp")  # fmt: skip
    by_file = _cli("LLaMA-3 8B", str(path), "64", "4M", *opts)
    preset = _cli("LLaMA-3 8B", "H100", "64", "4M", *opts)
    assert by_file.returncode == 0, by_file.stderr
    assert by_file.stdout.splitlines()[0].startswith("LLaMA-3 8B on 64 × My H100 (80 GB HBM each)")
    # calibration is per preset: a renamed accelerator without a [calibration] table has none, said in one
    # line naming what fell back to defaults; the memory does not depend on it
    assert by_file.stdout.splitlines()[2] == (
        "My H100 is not a preset and its file has no [calibration] table: defaults for matmul efficiency 0.65, "
        "scale-up efficiency 0.8, in-switch all-reduce off; none for HBM bandwidth (no weight-streaming floor, "
        "no elementwise term), HBM capacity (the datasheet's 80.0 GB used), FP8 peak ratio (no FP8 speedup); "
        "of these, only the HBM capacity bears on memory (whether it fits). "
        + calibrate.single_run_caveat(accelerator_file.from_file(path))
    )
    # and the η it falls back to is the default, which no run was fitted on: said in that caveat
    assert "matmul efficiency (0.65) is assumed, not fitted on any published run" in by_file.stdout.splitlines()[2]

    def columns(out):  # mesh: ((fits, memory GB, HBM GB), bound step ms) of every mesh
        out_rows = table_rows(out)
        assert out_rows
        return {
            r["mesh"]: (
                (r["fits"], float(r[cli.MEMORY_COLUMN].split(" / ")[0]), float(r[cli.MEMORY_COLUMN].split(" / ")[1])),
                float(r["bound step ms"].replace(",", "")),
            )
            for r in out_rows
        }

    mine, theirs = columns(by_file.stdout), columns(preset.stdout)
    assert mine.keys() == theirs.keys()
    # memory per device does not depend on the calibration
    assert all(mine[k][0][1] == theirs[k][0][1] for k in mine)
    # what fits does, through the HBM a device reports to the framework (calibrate.HBM_CAPACITY_BYTES,
    # per preset): a renamed H100 offers its datasheet's 80 GB, the H100 preset what NVML reports
    assert {m[0][2] for m in mine.values()} == {80} and {t[0][2] for t in theirs.values()} == {85.5}
    # a mesh fits when the step and the GPU reserve fit; above 95 % of HBM it is 'tight', not just 'yes';
    # the column shows both (as --explain's total), so its own figures give the verdict
    reserve = calibrate.memory_reserve_bytes("H100") / 1e9
    assert f"{reserve:,.1f} GB a device (--reserve), counted in the memory column" in by_file.stdout

    def verdict(used, hbm):
        return "no" if used > hbm else "tight" if used > 0.95 * hbm else "yes"

    for k in mine:
        memory_gb = mine[k][0][1]
        assert mine[k][0][0] == verdict(memory_gb, 80), k
        assert theirs[k][0][0] == verdict(memory_gb, 85.5), k
    # the bound moves: what planner.calibrate keys by preset name (the HBM bandwidth's weight-streaming
    # floor, in-switch all-reduce over NVLink SHARP) is not an Accelerator field, so a renamed H100 has neither
    assert any(mine[k][1] != theirs[k][1] for k in mine)
    flag = _cli("LLaMA-3 8B", "64", "4M", "--accelerator-file", str(path), *opts)
    assert flag.stdout == by_file.stdout


def test_explain_breaks_one_mesh_down_and_json_carries_it():
    args = ("LLaMA-3 70B", "H100", "128", "4M", "--seq-len", "8192", "--mesh", "fsdp=16,tp=8", "--explain")
    text = _cli(*args)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert "where its groups sit" in out and "16 domains × 1" in out and "inside one domain" in out
    assert (
        "Expected step by component:" in out and "Memory per device against 85.5 GB of HBM:" in out
    )  # the 85.5 GB NVML reports (calibrate)
    data = json.loads(_cli(*args, "--json").stdout)
    axes = {r["axis"]: r for r in data["axes"]}
    assert set(axes) == {"fsdp", "tp"}
    # FSDP gathers BF16 weights and reduce-scatters gradients: bytes over fsdp exceed the weights held
    assert axes["fsdp"]["bytes"] > 2 * models.param_count("LLaMA-3 70B") / 8
    for r in axes.values():
        assert r["hidden_s"] + r["exposed_s"] == pytest.approx(r["expected_s"])
        assert r["bound_s"] <= r["expected_s"]
    assert axes["tp"]["hidden_s"] == 0  # TP sits on the critical path without collective matmul
    assert sum(data["time_parts_s"].values()) == pytest.approx(data["expected_step_s"])
    # the table's memory column is the explanation's total, the reserve in it (it read 3 GB less)
    total_gb = next(float(line.split()[1]) for line in out.splitlines() if line.startswith("total") and "%" in line)
    (row,) = table_rows(_cli(*args[:-1]).stdout)
    assert row[cli.MEMORY_COLUMN] == f"{total_gb:,.1f} / 85.5"


@pytest.mark.parametrize(
    "args,message",
    [
        (("LLaMA-3 8B", "H100", "64", "-4M"), "tokens: must be a whole number >= 1, got '-4M'"),
        (("LLaMA-3 8B", "H100", "64", "4.5"), "tokens: must be a whole number >= 1"),
        (("LLaMA-3 8B", "H100", "-8", "4M"), "n_devices: must be a whole number >= 1"),
        (("LLaMA-3 8B", "H100", "-inf", "4M"), "n_devices: must be a whole number >= 1, got '-inf'"),
        (("LLaMA-3 8B", "H100", "64", "-NaN"), "tokens: must be a whole number >= 1, got '-NaN'"),
        (("LLaMA-3 8B", "H100", "64", "--batch-seqs", "0.5"), "--batch-seqs: must be a whole number >= 1"),
        (("LLaMA-3 8B", "H100", "64", "4M", "--seq-len", "-5"), "--seq-len: must be a whole number >= 1"),
        (("LLaMA-3 8B", "H100", "64", "1000000"), "tokens: 1,000,000 is not a whole number of sequences"),
        (
            ("LLaMA-3 8B", "H100", "7", "4096", "--no-uneven-pipeline"),
            "tokens: 1 sequence of 4,096 cannot give every data-parallel rank",
        ),
        (
            ("LLaMA-3 8B", "H100", "64", "4M", "--axes", "pp", "--no-uneven-pipeline"),
            "n_devices: no mesh of 64 devices over pp divides",
        ),
        (("LLaMA-3 8B", "H100", "64"), "arguments: expected MODEL ACCELERATOR N_DEVICES BATCH (4 values), got 3"),
        (("LLaMA-3 8B", "H100", "64", "4M", "--explain"), "--explain: name the mesh to explain with --mesh"),
        (("LLaMA-3 8B", "H100", "64", "4M", "--slices", "2"), "--slices: only a TPU job is cut into slices"),
        (("LLaMA-3 8B", "TPU v5p", "64", "4M", "--slices", "3"), "--slices: must divide the 64 chips of the job"),
        (("LLaMA-3 8B", "TPU v5p", "64", "4M", "--slices", "-2"), "--slices: must be a whole number >= 1"),
        pytest.param(  # two default searches of 70B on 256 H100 to say why: seconds of one core (make test runs it)
            ("LLaMA-3 70B", "H100", "256", "4M", "--seq-len", "8192", "--micro-batch", "1000"),
            "--micro-batch: microbatches of 1,000 sequences leave some data-parallel rank",
            marks=pytest.mark.slow,
        ),
        (("LLaMA-3 70b", "H100", "64", "4M"), "model: unknown preset 'LLaMA-3 70b'; did you mean 'LLaMA-3 70B'"),
        (("llama3 8b", "H100", "64", "4M"), "model: unknown preset 'llama3 8b'; did you mean 'LLaMA-3 8B'?"),
    ],
)
def test_bad_sizes_are_one_line(args, message):
    _refused(_cli(*args), message)


@pytest.mark.slow  # default searches by the command line beside --mesh and --explain: seconds of one core (make test runs it)
def test_a_mesh_explained_is_the_row_the_table_ranked():
    # --mesh without --micro-batch prices the mesh at the microbatch the search picks for it, so
    # --explain on a row of the table shows that row (it had taken one sequence per microbatch:
    # fsdp 32 x tp 8 ranks at 2, and was explained at 21.6 s against the row's 19.1 s)
    args = ("LLaMA-3 70B", "H100", "256", "4M", "--seq-len", "8192")
    rows = json.loads(_cli(*args, "--json", "--top", "50").stdout)
    row = next(r for r in rows if r["mesh"] == {"dp": 1, "fsdp": 32, "tp": 8, "cp": 1, "ep": 1, "pp": 1})
    assert row["micro_batch_seqs"] == 2
    explained = _cli(*args, "--mesh", "fsdp=32,tp=8", "--explain", "--assumptions")
    assert explained.returncode == 0, explained.stderr
    assert "2 sequence(s) per microbatch" in explained.stdout
    data = json.loads(_cli(*args, "--mesh", "fsdp=32,tp=8", "--explain", "--json").stdout)
    assert data["expected_step_s"] == pytest.approx(row["expected_step_s"], rel=1e-9)
    # with --assumptions, like every table the planner prints, the breakdown ends with the assumptions it rests on
    assert "\nAssumptions:\n" in explained.stdout
    assert explained.stdout.index("Assumptions:") > explained.stdout.index("Expected step by component:")
    # a microbatch the reader gives is kept
    one = json.loads(_cli(*args, "--mesh", "fsdp=32,tp=8", "--micro-batch", "1", "--json").stdout)
    assert one[0]["micro_batch_seqs"] == 1


def test_slices_spread_a_tpu_job_over_dcn_on_the_command_line():
    one = _cli("LLaMA-3 8B", "TPU v5p", "128", "4M", "--mesh", "dp=2,fsdp=64", "--explain")
    two = _cli("LLaMA-3 8B", "TPU v5p", "128", "4M", "--mesh", "dp=2,fsdp=64", "--explain", "--slices", "2")
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr

    def dp_row(result):
        return next(line for line in result.stdout.splitlines() if line.startswith("dp "))

    # one slice of 128 chips: dp takes a torus dimension; two of 64: dp is the two slices, over DCN
    assert "torus 2" in dp_row(one) and "2 slices × 1" in dp_row(two)
    bound_ms = [float(dp_row(r).split()[-4].replace(",", "")) for r in (one, two)]
    assert bound_ms[1] > 10 * bound_ms[0]


def test_bad_files_are_one_line(tmp_path):
    bad_json = tmp_path / "config.json"
    bad_json.write_text("{not json")
    _refused(_cli("--config", str(bad_json), "H100", "64", "4M"), f"--config: {bad_json}: not valid JSON")
    unknown = tmp_path / "gpt2.json"
    unknown.write_text(json.dumps({"model_type": "gpt2"}))
    _refused(_cli(str(unknown), "H100", "64", "4M"), f"{unknown}: unknown model_type 'gpt2'; families read: llama")
    negative = tmp_path / "neg.json"
    negative.write_text(json.dumps({**json.loads((CONFIGS / "llama3-8b.json").read_text()), "hidden_size": -4096}))
    _refused(_cli(str(negative), "H100", "64", "4M"), f"{negative}: hidden_size must be an integer >= 1, got -4096")
    bad_toml = tmp_path / "acc.toml"
    bad_toml.write_text('name = "x"\n[hbm_bytes\nvalue = 1\n')
    _refused(_cli("LLaMA-3 8B", str(bad_toml), "64", "4M"), f"{bad_toml}: not valid TOML")
    missing = tmp_path / "short.toml"
    missing.write_text(accelerator_file.to_toml("H100").split("\n[hbm_bytes]")[0] + "\n")
    _refused(_cli("LLaMA-3 8B", str(missing), "64", "4M"), f"{missing}: missing field 'hbm_bytes'")


@pytest.mark.slow  # default searches through the page and the command line: seconds of one core (make test runs it)
def test_the_page_runs_the_same_planner_and_refuses_in_one_sentence():
    config = (CONFIGS / "mixtral-8x7b-v0.1.json").read_text()
    form = {"model": "LLaMA-3 8B", "config": config, "accelerator": "H100", "n_devices": "64",
            "batch": "4M", "batch_seqs": "", "seq_len": "4096"}  # fmt: skip
    result = page.plan(json.dumps(form))
    assert result["ok"] and "the shapes of Mixtral-8x7B-v0.1, published: 46.70 B [jiang2024mixtral]" in result["model"]
    best = result["top"][0]
    assert sum(best["time_s"].values()) == pytest.approx(best["expected_step_s"])
    # the page's table says how each row runs, in the command line's words
    for row in result["top"]:
        axes = row["label"].split()
        if "pp" not in axes:
            assert row["schedule_text"] == "-", row["label"]  # no pipeline, no schedule
        else:
            assert row["schedule_text"].split()[0] in cli.SCHEDULE_NAMES.values(), row["label"]
        if "fsdp" in axes:  # FSDP gathers its weights: kept for the step or gathered again
            assert row["weights_text"] == ("kept" if row["keep_gathered_weights"] else "regathered")
    assert best["hbm_bytes"] == calibrate.hbm_capacity_bytes("H100") and all(
        v >= 0 for v in best["memory_bytes"].values()
    )
    refused = page.plan({**form, "config": "{not json"})
    assert refused == {
        "ok": False,
        "error": "config: not valid JSON (Expecting property name enclosed in double quotes, line 1)",
    }
    assert page.plan({**form, "n_devices": "-3"})["error"] == "n_devices: must be a whole number >= 1, got '-3'"
    too_big = page.plan({**form, "config": "", "model": "LLaMA-3 405B", "n_devices": "8", "batch": "64K"})
    assert too_big["ok"] and too_big["note"].startswith("No mesh fits: the smallest need")


def test_the_table_says_how_each_row_runs():
    # the review's "output clarity": the table showed the mesh but not its schedule, virtual stages or weight
    # handling, so a reader could not tell two rows of one mesh apart without --json; each row is priced here
    # under options given explicitly, so what the columns must say is known
    from shardbook import explorer

    def priced(mesh, **options):
        return explorer.evaluate("LLaMA-3 70B", "H100", mesh, 2**22, micro_batch_seqs=1, **options)

    given = [
        (priced({"fsdp": 8, "pp": 8}, schedule="interleaved", n_virtual=2, recompute="full", keep_gathered_weights=True),
         {"schedule": "interleaved v=2", "micro": "1", "recompute": "full", "weights": "kept"}),
        (priced({"fsdp": 8, "pp": 8}, schedule="dualpipe", recompute="selective"),
         {"schedule": "DualPipe", "recompute": "selective", "weights": "regathered"}),
        (priced({"tp": 8, "pp": 8}, schedule="zero_bubble", recompute="full"),
         {"schedule": "ZB-H1", "weights": "-"}),  # no FSDP: no weights gathered
        (priced({"fsdp": 64}, schedule="1f1b", recompute="none"), {"schedule": "-", "recompute": "none"}),  # no pipeline
    ]  # fmt: skip
    table = cli.format_table([c for c, _ in given])
    assert "precision" not in table.splitlines()[0]  # BF16 everywhere: no column for it
    for row, (_, want) in zip(table_rows(table), given, strict=True):
        assert {k: row[k] for k in want} == want, row
    # the matmuls' precision gets a column where a row runs FP8
    fp8 = priced({"fsdp": 64}, precision="fp8")
    rows = table_rows(cli.format_table([fp8, given[3][0]]))
    assert [r["precision"] for r in rows] == ["FP8", "BF16"]


def test_explain_names_the_pipeline_stage_that_holds_the_most():
    # a pipeline's devices differ: the explanation says whose memory it shows (the first stage
    # holds the embedding and keeps the most microbatches in flight; narayanan2021megatron)
    args = ("LLaMA-3 70B", "H100", "128", "4M", "--seq-len", "8192", "--mesh", "fsdp=4,tp=8,pp=4", "--explain")
    text = _cli(*args)
    assert text.returncode == 0, text.stderr
    data = json.loads(_cli(*args, "--json").stdout)
    assert data["memory_device"].startswith("stage ")
    assert f"HBM ({data['memory_device']}, the device that holds the most):" in text.stdout


# ---------------------------------------------------------------- a practitioner's trial (session 17)


def _lines(capsys, *args):
    from shardbook.planner import cli

    assert cli.main(list(args)) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.slow  # default searches by the command line under several options: seconds of one core (make test runs it)
def test_the_header_names_the_options_given_and_those_that_change_nothing(capsys):
    # the header and the assumptions were byte-identical to a default run's whatever was asked
    lines = _lines(capsys, "LLaMA-3 8B", "H100", "8", "1M", "--precision", "fp8", "--zero", "1",
                   "--ideal-overlap", "--fp8-dispatch", "--top", "1")  # fmt: skip
    assert lines[2] == "Options: --zero 1, --ideal-overlap, --precision fp8; no effect on a dense model: --fp8-dispatch"
    default = _lines(capsys, "LLaMA-3 8B", "H100", "8", "1M", "--top", "1")
    assert not any(line.startswith("Options:") for line in default)
    moe = _lines(capsys, "Mixtral 8x7B", "H100", "64", "4M", "--fp8-dispatch", "--top", "1")
    assert moe[2] == "Options: --fp8-dispatch"


def test_a_batch_the_ranks_do_not_divide_is_said_under_the_table(capsys):
    # 256 sequences over 7 ranks: priced at 36.57 microbatches with one generic assumption's word
    lines = _lines(capsys, "LLaMA-3 8B", "H100", "7", "1M", "--mesh", "fsdp=7")
    note = next(line for line in lines if line.startswith("Not a whole number of microbatches"))
    assert "(fsdp 7: 36.57 sequences per data-parallel rank)" in note  # 256 / 7
    assert "the bubble and the activations at the count rounded up" in note
    # 256 sequences divide over 8 ranks, 32 each, but not into microbatches of 3
    lines = _lines(capsys, "LLaMA-3 8B", "H100", "8", "1M", "--mesh", "fsdp=8", "--micro-batch", "3")
    note = next(line for line in lines if line.startswith("Not a whole number of microbatches"))
    assert "(fsdp 8: microbatches of 3 in 32 sequences per rank)" in note
    even = _lines(capsys, "LLaMA-3 8B", "H100", "8", "1M", "--top", "3")
    assert not any(line.startswith("Not a whole number") for line in even)


def test_a_fit_with_little_hbm_to_spare_is_said_under_the_table():
    import dataclasses

    from shardbook.planner import cli, evaluate

    # a mesh with room, and the same with its memory raised to 97 % of the HBM: the note names the second
    roomy = evaluate("LLaMA-3 8B", "H100", {"fsdp": 8}, 2**20, micro_batch_seqs=1)
    assert roomy.fits and roomy.memory_bytes_per_device < 0.95 * roomy.hbm_bytes
    assert cli.tight_memory_note([roomy]) == ""
    used, reserve = 0.94 * roomy.hbm_bytes, 0.03 * roomy.hbm_bytes
    breakdown = {"activations": used, "reserve": reserve, "headroom": roomy.hbm_bytes - used - reserve}
    squeezed = dataclasses.replace(roomy, memory_breakdown=breakdown)
    note = cli.tight_memory_note([squeezed, roomy])
    # the step (94 %) with the reserve (3 %) is over 95 %: named, and marked 'tight' in the table
    assert note.startswith(f"Tight, over 95% of HBM with the {reserve / 1e9:,.1f} GB reserve: fsdp 8 (97%)")
    assert cli.fits_text(squeezed) == "tight" and cli.fits_text(roomy) == "yes"


def test_rank_says_why_a_mesh_is_not_a_candidate(capsys):
    # DeepSeek-V3's own mesh: 61 layers on 16 stages needs uneven stages, which the hint did not say
    lines = _lines(capsys, "DeepSeek-V3", "H800", "2048", "--batch-seqs", "15360", "--rank", "dp=2,ep=64,pp=16",
                   "--axes", "dp,fsdp,ep,pp", "--top", "1", "--no-uneven-pipeline")  # fmt: skip
    assert next(t for t in lines if t.startswith("dp 2 × ep 64 × pp 16")) == (
        "dp 2 × ep 64 × pp 16: not among the candidates: mesh['pp']: 16 must divide the layers of DeepSeek-V3 (61) "
        "(or allow uneven stages: uneven_pipeline, --uneven-pipeline)"
    )
    # a mesh that fits nowhere, among candidates none of which fit
    lines = _lines(capsys, "LLaMA-3 405B", "H100", "8", "1M", "--rank", "fsdp=8")
    assert any(t.startswith("fsdp 8 does not fit, nor does any candidate: expected ") for t in lines)


def test_the_entry_point_gives_mains_status_and_streams():
    # the other tests call main() in this process (_cli); `python -m shardbook.explorer` itself must
    # print the table on stdout with status 0, and a refusal as one line on stderr with status 2
    def started(*args):
        return subprocess.run(
            [sys.executable, "-m", "shardbook.explorer", *args], capture_output=True, text=True, timeout=120
        )

    ran = started("LLaMA-3 8B", "H100", "8", "1M", "--mesh", "fsdp=8")
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    assert ran.stdout == _cli("LLaMA-3 8B", "H100", "8", "1M", "--mesh", "fsdp=8").stdout
    assert any(row["mesh"] == "fsdp 8" for row in table_rows(ran.stdout))
    _refused(started("LLaMA-3 8B", "v5p", "64", "4M"), "accelerator: unknown preset 'v5p'; did you mean 'TPU v5p'")
    _refused(started("LLaMA-3 8B", "H100", "64"), "arguments: expected MODEL ACCELERATOR N_DEVICES BATCH")


def test_a_closed_pipe_ends_the_command_quietly():
    # `| head -1`: the reader closes the pipe; with its read end closed before the first write, every
    # run meets the closed pipe (a shell pipe to head only sometimes did, by timing)
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "shardbook.explorer", "LLaMA-3 8B", "H100", "8", "1M", "--top", "3"],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert result.stderr == "", result.stderr
    assert result.returncode == 1  # as Python's documentation advises for a broken pipe


def test_an_accelerator_name_close_to_a_preset_is_suggested():
    from shardbook import hardware

    def hint(name):
        with pytest.raises(ValueError) as caught:
            hardware.get(name)
        return str(caught.value).split("; ")[1]

    # the one it spells (case, spaces, a leading TPU aside), or an alias's, alone
    assert hint("h100") == "did you mean 'H100'? known: " + ", ".join(hardware.names())
    assert hint("v5p").startswith("did you mean 'TPU v5p'? known")
    assert hint("tpu7x").startswith("did you mean 'Ironwood'? known")  # Google Cloud's name for it
    assert hint("TPU v7").startswith("did you mean 'Ironwood'? known")
    # a prefix first, then the closest spellings
    assert hint("GB200").startswith("did you mean 'GB200 NVL72' or ")
    assert hint("xyz").startswith("known: ")
    _refused(_cli("LLaMA-3 8B", "v5p", "64", "4M"), "accelerator: unknown preset 'v5p'; did you mean 'TPU v5p'")


def test_h800_plans_carry_the_single_run_caveat(capsys):
    # H800's η is DeepSeek-V3's alone: a dense BF16 plan there came out 67 % slower than on H100 with no word
    h800 = _lines(capsys, "LLaMA-3 8B", "H800", "8", "1M", "--top", "1")
    assert h800[2].startswith(
        f"H800's matmul efficiency ({calibrate.MATMUL_EFFICIENCY['H800'].value:.2f}) is fitted on one run"
    )
    assert f"sustains {calibrate.MATMUL_EFFICIENCY['H100'].value:.2f} in H100's" in h800[2]
    assert calibrate.single_run_caveat("H100") == "" == inputs.accelerator_note("TPU v5p")


@pytest.mark.parametrize("acc", ["GB200 NVL72", "GB300 NVL72", "B200"])
def test_blackwell_plans_carry_the_single_run_caveat(capsys, acc):
    # each η is fitted on one Megatron Bridge row (DGX-GB200, DGX-GB300; DGX-B200 in its archive): a plan says so
    lines = _lines(capsys, "LLaMA-3 8B", acc, "8", "1M", "--top", "1")
    value = calibrate.MATMUL_EFFICIENCY[acc].value
    assert lines[2] == calibrate.single_run_caveat(acc)
    assert lines[2].startswith(f"{acc}'s matmul efficiency ({value:.2f}) is fitted on one run")
    assert "not fitted on any published run" not in "\n".join(lines)


@pytest.mark.slow  # two default searches, the renamed template's and the preset's: seconds of one core (make test runs it)
def test_the_template_says_how_to_keep_the_presets_calibration(tmp_path, capsys):
    template = accelerator_file.to_toml("H100")
    assert template.startswith("# A template: give the accelerator a name of its own")
    assert accelerator_file.from_text(template, "toml", "same.toml").name == "H100"  # the comment changes nothing
    # done as the comment says, a renamed copy plans as the preset does
    path = tmp_path / "ours.toml"
    path.write_text(template.replace('name = "H100"', 'name = "Ours"', 1) + '\n[calibration]\nbased_on = "H100"\n')
    ours = _lines(capsys, "LLaMA-3 8B", str(path), "64", "4M", "--top", "3")
    preset = _lines(capsys, "LLaMA-3 8B", "H100", "64", "4M", "--top", "3")

    def table(lines):
        start = next(i for i, t in enumerate(lines) if t.startswith("mesh "))
        return lines[start : start + 5]

    assert table(ours) == table(preset)
    assert ours[2].startswith("Ours's calibration: from H100 (based_on)")


def test_a_config_of_another_release_with_the_same_shapes_is_not_named_as_it(tmp_path):
    # Qwen2-7B and Qwen2.5-7B share every shape: a Qwen2-7B config was labelled "published for Qwen2.5-7B"
    config = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
              "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False}  # fmt: skip
    path = tmp_path / "qwen2-7b.json"
    path.write_text(json.dumps(config))
    line = inputs.model_line(inputs.read_model(str(path)))
    assert line.endswith("; the shapes of Qwen2.5-7B, published: 7.62 B [qwen2024qwen25]"), line
    # named "Qwen2" (a prefix of the release's name), still not that release
    path.write_text(json.dumps({**config, "_name_or_path": "Qwen/Qwen2"}))
    assert "; the shapes of Qwen2.5-7B, published" in inputs.model_line(inputs.read_model(str(path)))
    # the release's own name (its organisation aside), or a book preset, is labelled as it
    path.write_text(json.dumps({**config, "_name_or_path": "Qwen/Qwen2.5-7B"}))
    assert "; published for Qwen2.5-7B: 7.62 B" in inputs.model_line(inputs.read_model(str(path)))
    assert "; published for Meta-Llama-3-8B: 8.03 B" in inputs.model_line("LLaMA-3 8B")


def test_h800s_caveat_follows_its_efficiency_into_a_file(tmp_path, capsys):
    # a renamed H800 that takes H800's calibration (the template's advice) is priced at the same η
    path = tmp_path / "ours.toml"
    text = accelerator_file.to_toml("H800").replace('name = "H800"', 'name = "Our H800"', 1)
    path.write_text(text + '\n[calibration]\nbased_on = "H800"\n')
    lines = _lines(capsys, "LLaMA-3 8B", str(path), "8", "1M", "--top", "1")
    assert lines[2].startswith("Our H800's calibration: from H800 (based_on) matmul efficiency")
    assert lines[2].endswith(calibrate.single_run_caveat("H800")) and calibrate.single_run_caveat("H800")
    # its own η: no caveat
    path.write_text(text + '\n[calibration]\nbased_on = "H800"\nmatmul_efficiency = { value = 0.5, source = "ours" }\n')
    assert "fitted on one run" not in "\n".join(_lines(capsys, "LLaMA-3 8B", str(path), "8", "1M", "--top", "1"))


def test_rank_prices_the_mesh_as_the_search_does(capsys):
    # the search caps --n-virtual at what a mesh's stages allow; --rank gave n_virtual's refusal for a mesh
    # whose real reason was an axis left out of --axes
    lines = _lines(capsys, "LLaMA-3 70B", "H100", "32", "4M", "--seq-len", "8192", "--schedule", "interleaved",
                   "--n-virtual", "4", "--rank", "dp=2,pp=16", "--axes", "fsdp,tp,ep,pp")  # fmt: skip
    assert next(t for t in lines if t.startswith("dp 2 × pp 16")) == (
        "dp 2 × pp 16: not among the candidates: no candidate uses dp (name it in --axes)"
    )


# --- where a mesh with expert parallelism would overtake the first row (issue 46) ---------------


def _qwen3_rows():
    """Qwen3-30B-A3B on 64 H100, 512 sequences of 4,096: the review's first row (fsdp 64) and a mesh
    with expert parallelism that hides far less communication behind its math."""
    m = inputs.read_model(str(CONFIGS / "qwen3-30b-a3b.json"))
    tokens = 512 * 4096
    fsdp = explorer.evaluate(m, "H100", {"fsdp": 64}, tokens, seq_len=4096, micro_batch_seqs=2)
    ep = explorer.evaluate(
        m,
        "H100",
        {"dp": 2, "ep": 8, "pp": 4},
        tokens,
        seq_len=4096,
        schedule="dualpipe",
    )
    return fsdp, ep


def test_the_share_that_overtakes_is_where_both_steps_meet():
    fsdp, ep = _qwen3_rows()
    assert fsdp.expected_step_s < ep.expected_step_s and fsdp.hidden_comm_s > ep.hidden_comm_s
    share = cli.exposure_to_overtake(fsdp, ep)
    assert 0 < share < 1
    # each row loses that share of its own hidden communication: the two steps meet
    assert fsdp.expected_step_s + share * fsdp.hidden_comm_s == pytest.approx(
        ep.expected_step_s + share * ep.hidden_comm_s
    )
    # a row already no slower needs no share; one that hides as much and is slower never catches up
    assert cli.exposure_to_overtake(ep, fsdp) == 0.0
    slower = dataclasses.replace(fsdp, expected_step_s=1.05 * fsdp.expected_step_s)
    assert cli.exposure_to_overtake(fsdp, slower) is None


def test_the_ep_overtake_line_names_the_share_and_the_mesh():
    fsdp, ep = _qwen3_rows()
    line = cli.ep_overtake_line([fsdp, ep])
    share = cli.exposure_to_overtake(fsdp, ep)
    assert line.startswith("Against expert parallelism: fsdp 64 (")
    assert f"less than {share:.1%} of its hidden communication" in line and f"beyond that {ep.label} (" in line
    # nothing to say where the first row already uses ep, or for a dense model
    assert cli.ep_overtake_line([ep]) == ""
    dense = explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 8}, 2**20)
    assert cli.ep_overtake_line([dense]) == ""
    # a mesh with ep that hides as much as the first row and is slower never overtakes it
    twin = dataclasses.replace(fsdp, ep=8, fsdp=8, expected_step_s=1.05 * fsdp.expected_step_s)
    assert "no fitting mesh with ep overtakes fsdp 64" in cli.ep_overtake_line([fsdp, twin])


@pytest.mark.parametrize("rank", ["fsdp=2,fsdp=4", "", "fsdp", "fsdp=x"])
def test_a_bad_rank_names_rank_not_mesh(rank, capsys):
    """--rank is read as a mesh; its errors named --mesh, an option the
    reader had not given (the CLI reliability review)."""
    from shardbook.planner import cli

    assert cli.main(["LLaMA-3 8B", "H100", "8", "1M", "--rank", rank]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --rank: "), err


@pytest.mark.parametrize("reserve", ["8", "0.5", "1e-9"])
def test_a_reserve_without_a_unit_below_a_megabyte_is_refused(reserve, capsys):
    """'--reserve 8' held back 8 bytes without a word; the help's example is 8GB."""
    from shardbook.planner import cli

    assert cli.main(["LLaMA-3 8B", "H100", "8", "1M", "--mesh", "tp=8", "--reserve", reserve]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --reserve: a plain number is bytes; give a unit, e.g. {reserve}GB, got '{reserve}'"]


def test_a_reserve_of_zero_or_in_plain_bytes_is_taken(capsys):
    from shardbook.planner import cli

    for reserve, shown in (("0", "0.0 GB"), ("3000000000", "3.0 GB"), ("8GB", "8.0 GB")):
        assert cli.main(["LLaMA-3 8B", "H100", "8", "1M", "--mesh", "tp=8", "--reserve", reserve]) == 0
        out = capsys.readouterr().out
        assert f"fragmentation): {shown} a device (--reserve)" in out, out[:600]
