"""Injected corpora from ../shared/data/paraphrase and the wiki sample (semantic tier tests and
``scripts/bench_semantic.py``).

Per MMLU subject, item ``i`` (its query: the question and its four choices) is
- ``i % 4 == 0``: rephrased (English), injected;
- ``i % 4 == 1``: translated (Chinese), injected;
- otherwise not injected: a hard negative (same subject, not in the corpus);
- with ``train_verbatim``, ``i % 4 == 2`` is instead a "training item": in the corpus verbatim
  (its own document), as a benchmark's train split sits beside its rephrased test items, and not
  checked (``Item.injected == "train"``): the checked negatives are then ``i % 4 == 3``, with
  same-subject items verbatim in the corpus.
The injection kind cycles over ``own`` (its own document), ``spliced`` (inserted at a paragraph
break in the middle of a long article) and ``rewrapped`` (hard-wrapped at 40 columns as a quoted
e-mail, its own document). Items whose rephrasing is empty are negatives.

The subject ``svamp`` (math word problems, ``tests/data/svamp_paraphrase``; not in ``SUBJECTS``): test
item ``i`` is rephrased (English) and injected when ``i % 2 == 0``, the kind alternating ``own`` /
``spliced`` (the two kinds of the held-apart check), and a negative when ``i % 2 == 1``; its query is
lm-eval's gsm8k prompt (``doc_to_text``, there being no decontamination query). With
``train_verbatim`` all 200 items of its train split sit in the corpus verbatim (question and answer,
each its own document) as ``Item.injected == "train"``, not checked.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

SUBJECTS = ("abstract_algebra", "high_school_us_history", "sociology")
KINDS = ("own", "spliced", "rewrapped")
SVAMP = "svamp"
SVAMP_FOLDER = Path(__file__).resolve().parent / "data" / "svamp_paraphrase"
SVAMP_KINDS = ("own", "spliced")


@dataclass(frozen=True)
class Item:
    subject: str
    index: int
    query: str
    injected: str | None  # "rephrased" / "translated" / "train" (verbatim, not checked) / None
    kind: str | None


def mmlu_yaml(subject: str) -> str:
    """A task YAML for one subject's ``cais/mmlu`` rows (lm-eval's prompt; query: question, options)."""
    options = "\\n".join(f"{letter}. {{{{choices[{k}]}}}}" for k, letter in enumerate("ABCD"))
    query = "{{question.strip()}}\\n" + options
    return (f"task: mmlu_{subject}\ndataset_path: cais/mmlu\noutput_type: multiple_choice\ntest_split: test\n"
            f'doc_to_text: "{query}\\nAnswer:"\ndoc_to_target: "{{{{answer}}}}"\n'
            f'doc_to_choice: ["A", "B", "C", "D"]\nshould_decontaminate: true\n'
            f'doc_to_decontamination_query: "{query}"\n')


def svamp_yaml() -> str:
    """The SVAMP items as lm-eval's ``gsm8k`` task reads GSM8K: the prompt ``doc_to_text`` and no
    ``doc_to_decontamination_query``, so the decontamination query falls back to the prompt."""
    return ('task: svamp\ndataset_path: svamp_paraphrase\noutput_type: generate_until\ntest_split: test\n'
            'doc_to_text: "Question: {{question}}\\nAnswer:"\ndoc_to_target: "{{answer}}"\n'
            'generation_kwargs:\n  until: ["Question:"]\n  do_sample: false\n')


def svamp_query(row: dict) -> str:
    """``svamp_yaml``'s ``doc_to_text`` rendered: the query decontamination checks."""
    return f"Question: {row['question']}\nAnswer:"


def task_name(subject: str) -> str:
    """The task name (and output folder) of a subject's task YAML."""
    return SVAMP if subject == SVAMP else f"mmlu_{subject}"


def item_query(row: dict) -> str:
    return row["question"] + "\n" + "\n".join(f"{'ABCD'[k]}. {c}" for k, c in enumerate(row["choices"]))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def load_items(folder: Path, subjects: tuple[str, ...] = SUBJECTS, train_verbatim: bool = False
               ) -> tuple[list[Item], dict]:
    """Every item of ``subjects`` and, per (subject, index), the text injected for it."""
    items, texts = [], {}
    for s in subjects:
        if s == SVAMP:
            more, more_texts = _svamp_items(train_verbatim)
            items += more
            texts.update(more_texts)
            continue
        rows = _jsonl(folder / f"mmlu_{s}_test.jsonl")
        reph = _jsonl(folder / f"mmlu_{s}_test_rephrased_en.jsonl")
        zh = _jsonl(folder / f"mmlu_{s}_test_translated_zh.jsonl")
        for i, row in enumerate(rows):
            how, text = None, ""
            if i % 4 == 0 and reph[i]["text"].strip():
                how, text = "rephrased", reph[i]["text"]
            elif i % 4 == 1 and zh[i]["text"].strip():
                how, text = "translated", zh[i]["text"]
            elif i % 4 == 2 and train_verbatim:
                how, text = "train", item_query(row)
            kind = ("own" if how == "train" else KINDS[(i // 4) % 3]) if how else None
            items.append(Item(s, i, item_query(row), how, kind))
            if how:
                texts[(s, i)] = text
    return items, texts


def _svamp_items(train_verbatim: bool) -> tuple[list[Item], dict]:
    rows = _jsonl(SVAMP_FOLDER / "svamp_test.jsonl")
    reph = _jsonl(SVAMP_FOLDER / "svamp_test_rephrased_en.jsonl")
    items, texts = [], {}
    for i, (row, r) in enumerate(zip(rows, reph, strict=True)):
        if r["id"] != row["id"]:
            raise ValueError(f"{SVAMP_FOLDER}/svamp_test_rephrased_en.jsonl line {i + 1}: id {r['id']!r} "
                             f"is not the test item's {row['id']!r}")
        injected = i % 2 == 0 and bool(r["text"].strip())
        items.append(Item(SVAMP, i, svamp_query(row), "rephrased" if injected else None,
                          SVAMP_KINDS[(i // 2) % 2] if injected else None))
        if injected:
            texts[(SVAMP, i)] = r["text"]
    if train_verbatim:  # after the test items: indices len(rows).., not rows of the checked task
        for k, row in enumerate(_jsonl(SVAMP_FOLDER / "svamp_train.jsonl"), start=len(rows)):
            items.append(Item(SVAMP, k, svamp_query(row), "train", "own"))
            texts[(SVAMP, k)] = f"{svamp_query(row)} {row['answer']}"
    return items, texts


def write_corpus(wiki: Path, items: list[Item], texts: dict, out: Path, copies: int = 1) -> Path:
    """The wiki sample (``copies`` times) with the injected items, as one JSONL file."""
    articles = _jsonl(wiki)
    long_ones = [k for k, a in enumerate(articles) if len(a["text"].split()) > 3000]
    splice: dict[int, list[str]] = {}
    extra: list[dict] = []
    for j, it in enumerate(x for x in items if x.injected):
        text = texts[(it.subject, it.index)]
        if it.kind == "spliced":
            splice.setdefault(long_ones[j % len(long_ones)], []).append(text)
        elif it.kind == "rewrapped":
            extra.append({"id": f"inj-{it.subject}-{it.index}", "title": "mail",
                          "text": "\n".join("> " + line for line in textwrap.wrap(text, 40))})
        else:
            extra.append({"id": f"inj-{it.subject}-{it.index}", "title": "note", "text": text})
    with out.open("w", encoding="utf-8") as fh:
        for c in range(copies):
            for k, a in enumerate(articles):
                body = a["text"]
                if c == 0 and k in splice:
                    paras = body.split("\n\n")
                    for t, ins in enumerate(splice[k]):
                        at = max(1, (len(paras) * (t + 1)) // (len(splice[k]) + 1))
                        paras.insert(at, ins)
                    body = "\n\n".join(paras)
                fh.write(json.dumps({"id": f"{a['id']}-{c}", "text": body}) + "\n")
        for e in extra:
            fh.write(json.dumps({"id": e["id"], "text": e["text"]}) + "\n")
    return out


def english_devset(folder: Path, wiki_sample: Path, root: Path, subject: str, wiki_docs: int) -> dict:
    """One subject's English injections (rephrased items as their own docs, spliced, re-wrapped;
    no translations) into the first ``wiki_docs`` wiki articles (``injected_devset``)."""
    return injected_devset(folder, wiki_sample, root, subject, wiki_docs, "rephrased")


def injected_devset(folder: Path, wiki_sample: Path, root: Path, subject: str, wiki_docs: int, how: str
                    ) -> dict:
    """One subject's injections of one kind (``how``: "rephrased" or "translated"; the items of the
    other kind are left out of the task) into the first ``wiki_docs`` wiki articles, with its task
    YAML and local data file (of the subject's first 100 items): ``corpus`` (a path string),
    ``task``, ``data`` (``data_files``), ``injected`` (per item)."""
    import numpy as np

    items, texts = load_items(folder, (subject,))
    items = [it for it in items if it.injected in (how, None) and it.index < 100]
    wiki = root / "wiki.jsonl"
    with open(wiki_sample, encoding="utf-8") as fh:
        wiki.write_text("".join(fh.readline() for _ in range(wiki_docs)), encoding="utf-8")
    corpus = write_corpus(wiki, items, texts, root / "corpus.jsonl")
    task = root / f"mmlu_{subject}.yaml"
    task.write_text(mmlu_yaml(subject), encoding="utf-8")
    data = root / "test.jsonl"
    kept = {it.index for it in items}
    rows = (folder / f"mmlu_{subject}_test.jsonl").read_text(encoding="utf-8").split("\n")[:100]
    data.write_text("\n".join(r for i, r in enumerate(rows) if i in kept) + "\n", encoding="utf-8")
    return {"corpus": str(corpus), "task": str(task), "data": {task.stem: {"test": data}},
            "injected": np.array([it.injected is not None for it in items])}
