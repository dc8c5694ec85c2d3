"""The book's glossary (book machinery, layer 3): its terms as data, the
directive that writes them as a Sphinx glossary, and the transform that links
the first use of each term in every other page to its entry.

A term's `patterns` are the regular expressions that find it in prose
(abbreviations match case-sensitively, words in any case); a term written
only as a formula (`M_X`) has none and is not linked (a link around a
formula has no name a screen reader can read). Only running text is linked: headings, captions, code, tables,
exercises and their solutions, and text already inside a link are left alone.
"""

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    """One glossary entry: the term as shown, its definition (MyST) and the
    patterns that find it in prose."""

    term: str
    definition: str
    patterns: tuple = ()


TERMS = (
    Term(
        "α (alpha)",
        "A device's peak FLOP/s divided by the bandwidth its collectives see, $C/W$ (W: a GPU's "
        "scale-up egress, one direction; on a TPU one ICI link counted both ways, what a chip sends along "
        "one wrapped torus axis): the FLOPs it must "
        "do per byte it sends for the communication to hide behind the computation. Data parallelism "
        "over one such axis stays compute-bound above about α tokens per device per step.",
        patterns=("α",),
    ),
    Term(
        "M_X",
        "The number of torus axes that the data axis spans. A data axis laid over more axes moves its "
        "bytes over that many times the links, so the compute-bound threshold becomes "
        "$\\alpha/M_X$ tokens per device.",
    ),
    Term(
        "mesh",
        "The devices arranged as an array whose axes are named after the schemes that use them "
        "(`fsdp`, `tp`, `ep`, `pp`); a sharding says which axis splits which dimension of an array.",
        patterns=(r"(?i)\bmesh\b",),
    ),
    Term(
        "collective",
        "An operation in which every device of a group takes part and data moves over the links: "
        "all-gather, reduce-scatter, all-reduce, all-to-all and collective permute.",
        patterns=(r"(?i)\bcollectives?\b",),
    ),
    Term(
        "all-gather",
        "Each device brings its shard and ends with the whole array, receiving $(N-1)/N$ of its bytes.",
        patterns=(r"(?i)\ball-gather(s|ed|ing)?\b",),
    ),
    Term(
        "reduce-scatter",
        "Each device brings a full-size partial result and ends with one shard of the sum.",
        patterns=(r"(?i)\breduce-scatter(s|ed|ing)?\b",),
    ),
    Term(
        "all-reduce",
        "Each device ends with the sum of every device's array; on a ring, a reduce-scatter followed "
        "by an all-gather, twice the bytes of either.",
        patterns=(r"(?i)\ball-reduc(e|es|ed|ing)\b",),
    ),
    Term(
        "all-to-all",
        "Each device sends a different slice of its array to every other device: the dispatch and "
        "combine of expert parallelism, and the head exchange of Ulysses attention.",
        patterns=(r"(?i)\ball-to-alls?\b",),
    ),
    Term(
        "bus bandwidth",
        "A collective's algorithm bandwidth (its bytes divided by its time) scaled by the factor "
        "that makes it comparable with a link's rate: $2(N-1)/N$ for an all-reduce, $(N-1)/N$ for "
        "an all-gather or a reduce-scatter. NCCL's and RCCL's tests report it.",
        patterns=(r"(?i)\bbus bandwidth\b",),
    ),
    Term(
        "scale-up domain",
        "The devices joined by the fast fabric of a node, a rack or a TPU pod (xGMI, NVLink, ICI); "
        "one TPU job joins a slice of the pod, and a v5p slice cannot span the whole pod (see the presets page). "
        "A device's bandwidth inside it is several times its share of the network's (GPU nodes) to tens "
        "of times (TPU pods); chapter 1 gives the range over the presets.",
        patterns=(r"(?i)\bscale-up domains?\b",),
    ),
    Term(
        "ICI and DCN",
        "A TPU slice's inter-chip interconnect (direct links between neighbouring chips of its torus) "
        "and the data-center network between slices; MaxText's settings name each mesh axis's degree "
        "over both (ici_fsdp_parallelism, dcn_data_parallelism).",
        patterns=(r"\bICI\b", r"\bDCN\b"),
    ),
    Term(
        "rail",
        "One local rank's path out of its node, its PCIe link and NIC (bounded by the slower); in a "
        "rail-optimized network the NICs of that local rank in every node share leaf switches, so a "
        "collective whose groups hold one local rank per node stays on its rail.",
        patterns=(r"(?i)\brails?\b",),
    ),
    Term(
        "data parallelism (DP)",
        "Every device holds all the weights and a slice of the batch; the gradients are all-reduced once per step.",
        patterns=(r"(?i)\bdata parallelism\b", r"\bDP\b"),
    ),
    Term(
        "FSDP (ZeRO-3)",
        "Fully sharded data parallelism: weights, gradients and optimizer state are split over the "
        "data axis; each layer's weights are all-gathered before use and its gradients "
        "reduce-scattered after.",
        patterns=(r"\bFSDP\b", r"\bZeRO\b"),
    ),
    Term(
        "HSDP",
        "Hybrid sharded data parallelism: FSDP inside each scale-up domain or slice, plain data "
        "parallelism across them.",
        patterns=(r"\bHSDP\b",),
    ),
    Term(
        "tensor parallelism (TP)",
        "A layer's weight matrices are split over the `tp` axis (Megatron's column split, then row "
        "split), so activations travel instead of weights.",
        patterns=(r"(?i)\btensor parallelism\b", r"\bTP\b"),
    ),
    Term(
        "sequence parallelism (SP)",
        "With tensor parallelism, the work outside the matmuls (norms, dropout) is split along the "
        "sequence, so each of TP's all-reduces becomes a reduce-scatter and an all-gather.",
        patterns=(r"(?i)\bsequence parallelism\b",),
    ),
    Term(
        "context parallelism (CP)",
        "The sequence is split over devices for attention too: keys and values travel between them "
        "around a ring or are all-gathered, or (Ulysses) all-to-alls trade the sequence split of Q, K "
        "and V for a split of the heads and trade the output back.",
        patterns=(r"(?i)\bcontext parallelism\b",),
    ),
    Term(
        "expert parallelism (EP)",
        "The experts of a mixture-of-experts layer live on different devices; tokens travel to their "
        "experts and back by all-to-alls.",
        patterns=(r"(?i)\bexpert parallelism\b", r"\bEP\b"),
    ),
    Term(
        "capacity factor",
        "The slots each expert has, as a multiple of an even share of a group's routed tokens, "
        "$\\lceil c\\,kT/E \\rceil$ for T tokens; "
        "tokens beyond an expert's capacity are dropped or wait.",
        patterns=(r"(?i)\bcapacity factors?\b",),
    ),
    Term(
        "pipeline parallelism (PP)",
        "The layers are split into stages on different devices and microbatches flow through them; "
        "only activations (forward) and their gradients (backward) cross between stages.",
        patterns=(r"(?i)\bpipeline parallelism\b", r"\bPP\b"),
    ),
    Term(
        "microbatch",
        "A slice of the batch that a pipeline, or gradient accumulation, processes at a time.",
        patterns=(r"(?i)\bmicrobatch(es)?\b",),
    ),
    Term(
        "bubble",
        "The time the stages of a pipeline wait while it fills and drains: for GPipe and 1F1B, "
        "$(p-1)/(m+p-1)$ of the step with $p$ stages and $m$ microbatches.",
        patterns=(r"(?i)\bbubbles?\b",),
    ),
    Term(
        "1F1B",
        "A pipeline schedule that, once the pipeline is full, alternates one microbatch's forward "
        "pass and one's backward pass on each stage, so a stage holds at most $p$ microbatches' "
        "activations.",
        patterns=(r"\b1F1B\b",),
    ),
    Term(
        "MFU",
        "Model FLOPs utilization: the FLOPs the model needs per step, divided by the step time and "
        "by the devices' peak FLOP/s.",
        patterns=(r"\bMFU\b",),
    ),
    Term(
        "activation checkpointing",
        "Keeping only some activations in the forward pass and recomputing the others in the "
        "backward pass: FLOPs traded for memory (also called rematerialization).",
        patterns=(r"(?i)\b(activation )?checkpointing\b", r"(?i)\brematerializ(ation|ed)\b"),
    ),
    Term(
        "HLO",
        "XLA's representation of a program; the book captures it before and after the SPMD "
        "partitioner and reads the collectives from it.",
        patterns=(r"\bHLO\b",),
    ),
    Term(
        "SPMD partitioner",
        "XLA's compiler pass that turns a program annotated with shardings into the program each "
        "device runs, inserting the collectives; GSPMD and Shardy propagate the shardings it reads.",
        patterns=(r"(?i)\bSPMD partition(er|ing)\b", r"\bGSPMD\b", r"\bShardy\b"),
    ),
)


def _check(terms):
    names = [t.term for t in terms]
    if len(set(n.lower() for n in names)) != len(names):
        raise ValueError("glossary: a term is declared twice")
    for t in terms:
        if not t.definition.strip():
            raise ValueError(f"glossary: {t.term}: no definition")
        for pattern in t.patterns:
            re.compile(pattern)


_check(TERMS)


def glossary_source(terms=TERMS):
    """The MyST text of a Sphinx glossary of `terms`."""
    lines = ["```{glossary}", ":sorted:", ""]
    for t in terms:
        lines += [t.term, *(f"  {line}" for line in t.definition.splitlines()), ""]
    return "\n".join(lines + ["```", ""])


def first_match(text, term):
    """(start, end) of the first place `term` is named in `text`, or None."""
    found = [m for pattern in term.patterns if (m := re.search(pattern, text))]
    if not found:
        return None
    first = min(found, key=lambda m: m.start())
    return first.start(), first.end()


# --- Sphinx ---------------------------------------------------------------

GLOSSARY_DOCNAME_SUFFIX = "_glossary"


def _skipped(node):
    """Text that is not running prose (headings, captions, code, tables, cell
    outputs), or already a link."""
    from docutils import nodes
    from sphinx import addnodes

    skip = (
        nodes.title,
        nodes.caption,
        nodes.literal,
        nodes.literal_block,
        nodes.reference,
        addnodes.pending_xref,
        nodes.term,
        nodes.raw,
        nodes.table,
        nodes.rubric,
        nodes.container,  # myst-nb's code cells and their outputs
        nodes.Admonition,  # notes, and (below) exercises and solutions: coloured boxes
    )
    parent = node.parent
    while parent is not None:
        if isinstance(parent, skip) or type(parent).__name__.startswith(("exercise", "solution")):
            return True
        if isinstance(parent, nodes.inline) and "pasted-text" in parent.get("classes", []):
            return True  # a glued value: live mode rewrites its text
        parent = parent.parent
    return False


def _xref(docname, term, child):
    from sphinx import addnodes

    ref = addnodes.pending_xref(
        "", refdomain="std", reftype="term", reftarget=term.term, refexplicit=True, refwarn=True, refdoc=docname
    )
    ref += child
    return ref


def link_first_uses(app, doctree):
    """In a page's `doctree`, as read, wrap the first mention of every term in
    a link to its entry (resolved with the page's other references)."""
    from docutils import nodes

    docname = app.env.docname
    if docname.endswith(GLOSSARY_DOCNAME_SUFFIX):
        return
    pending = list(TERMS)
    candidates = [
        n
        for n in doctree.findall(nodes.Text)
        if isinstance(n.parent, (nodes.paragraph, nodes.inline, nodes.emphasis, nodes.strong))
    ]
    for node in candidates:
        if not pending:
            break
        if node.parent is None or _skipped(node):
            continue
        text = str(node)
        hits = [(span, t) for t in pending if (span := first_match(text, t))]
        if not hits:
            continue
        # one link per text node: the earliest; the others wait for a later node
        (start, end), term = min(hits, key=lambda h: h[0][0])
        inline = nodes.inline(text[start:end], text[start:end], classes=["xref", "std", "std-term"])
        replacement = [nodes.Text(text[:start]), _xref(docname, term, inline), nodes.Text(text[end:])]
        node.parent.replace(node, [r for r in replacement if not (isinstance(r, nodes.Text) and not str(r))])
        pending.remove(term)


def setup(app):
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective

    class GlossaryDirective(SphinxDirective):
        """`{shardbook-glossary}`: the glossary of shardbook.book.glossary.TERMS."""

        def run(self):
            from docutils import nodes

            holder = nodes.container()
            self.state.nested_parse(StringList(glossary_source().splitlines(), source=__name__), 0, holder)
            return holder.children

    app.add_directive("shardbook-glossary", GlossaryDirective)
    app.connect("doctree-read", link_first_uses)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
