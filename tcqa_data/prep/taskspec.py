"""Declarative task specs in lm-eval's YAML vocabulary.

A task spec says how a benchmark doc becomes a prompt, a target, a set of choices and a
decontamination query. Templates are Jinja2, rendered the way lm-eval renders them, but in a sandbox
(:mod:`tcqa_data.prep.templates`): a task YAML from elsewhere cannot run code through them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import jinja2
import jinja2.meta
import pydantic
import yaml

from tcqa_data.errors import ConfigError
from tcqa_data.io_utils import decode_utf8, read_regular_file
from tcqa_data.outputs import check_name
from tcqa_data.prep.templates import ENV as _ENV
from tcqa_data.prep.templates import RenderClock, check_source, render

OUTPUT_TYPES = ("multiple_choice", "generate_until", "loglikelihood")
MAX_TASK_FILE_BYTES = 1 << 20  # a task YAML is a few hundred bytes; a larger one is refused unread


class _Metric(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow", strict=True)
    metric: str


class TaskSpecSchema(pydantic.BaseModel):
    """The type and range of every task-spec field, checked where a task YAML is read (strict: no
    field is silently converted, so ``doc_to_choice: 5`` or ``metric_list: acc`` is refused)."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    task: str = pydantic.Field(min_length=1)
    output_type: Literal["multiple_choice", "generate_until", "loglikelihood"]
    doc_to_text: str
    doc_to_target: str | int
    dataset_path: str | None = None
    dataset_name: str | None = None
    dataset_aliases: list[str] = []
    dataset_kwargs: dict[str, Any] | None = None
    validation_split: str | None = None
    test_split: str | None = None
    doc_to_choice: list[str] | None = None
    target_delimiter: str = " "
    generation_kwargs: dict[str, Any] | None = None
    should_decontaminate: bool = False
    doc_to_decontamination_query: str | None = None
    metric_list: list[_Metric] | None = None
    metadata: dict[str, Any] | None = None
    group_by: list[str] = []
    label_values: dict[str, int] | None = None
    tsv_columns: list[str] = []
    attribution_fields: list[str] = []
    report_by: list[str] = []
    memorization_text: str | None = None


_LIST_FIELDS = ("doc_to_choice", "dataset_aliases", "group_by", "tsv_columns", "attribution_fields",
                "report_by")
_FIELD_EXPECTED = {**dict.fromkeys(_LIST_FIELDS, "a list of strings"),
                   "doc_to_target": "a string or an integer",
                   "label_values": "a mapping of label value to integer",
                   "metric_list": "a list of mappings, each with a 'metric' name"}
_EXPECTED = {"missing": "the key to be given", "list_type": "a list", "dict_type": "a mapping",
             "string_type": "a string", "int_type": "an integer", "bool_type": "true or false",
             "literal_error": "one of " + ", ".join(OUTPUT_TYPES)}


def schema_problem(exc: pydantic.ValidationError, source: str) -> str:
    """One line for the first schema error: the file, the field, its value, what was expected."""
    err = exc.errors()[0]
    loc = ".".join(str(part) for part in err["loc"] if part not in ("str", "int"))  # union member tags
    value = err.get("input")
    parts = [p for p in err["loc"] if p not in ("str", "int")]
    expected = _FIELD_EXPECTED.get(str(parts[0])) if parts and err["type"] != "missing" else None
    expected = expected or _EXPECTED.get(err["type"], err["msg"].removeprefix("Input should be ").rstrip("."))
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return (f"task spec {source}: field {loc} is {value!r:.80} ({type(value).__name__}); "
            f"expected {expected}{more}")


@dataclass(frozen=True)
class TaskSpec:
    """One benchmark task. Field names follow lm-eval's task YAML."""

    task: str
    output_type: str
    doc_to_text: str
    doc_to_target: str
    dataset_path: str | None = None
    dataset_name: str | None = None
    dataset_aliases: tuple[str, ...] = ()
    # Keyword arguments of datasets.load_dataset, as in lm-eval (MC-TACO: the hub's Parquet revision).
    dataset_kwargs: dict[str, Any] = field(default_factory=dict)
    validation_split: str | None = None
    test_split: str | None = None
    doc_to_choice: tuple[str, ...] | None = None
    target_delimiter: str = " "
    generation_kwargs: dict[str, Any] = field(default_factory=dict)
    should_decontaminate: bool = False
    doc_to_decontamination_query: str | None = None
    metric_list: tuple[dict[str, Any], ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    group_by: tuple[str, ...] = ()
    label_values: dict[str, int] = field(default_factory=dict)
    tsv_columns: tuple[str, ...] = ()
    # Fields whose text is located inside the rendered decontamination query so matches can be
    # attributed to them (default: the fields the query template reads). Lets a query that is one
    # pre-rendered field (squad's `text`) still say "passage" vs "question".
    attribution_fields: tuple[str, ...] = ()
    # Fields the report breaks the clean share down by (MC-TACO: category).
    report_by: tuple[str, ...] = ()
    # The text whose memorization scores evaluate records as ``query`` (default: the decontamination
    # query): a Jinja2 template over the doc's fields, or the name of one of the task's templates
    # (``doc_to_text``, ``doc_to_decontamination_query``).
    memorization_text: str | None = None
    source: str | None = None  # where the spec was read from

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str | None = None) -> TaskSpec:
        where = f" in {source}" if source else ""
        for key in ("task", "output_type", "doc_to_text", "doc_to_target"):
            if key not in raw:
                raise ConfigError(f"task spec{where} lacks the required key {key!r}")
        known = set(cls.__dataclass_fields__) - {"source"}
        unknown = sorted(str(k) for k in set(raw) - known)
        if unknown:
            raise ConfigError(f"task spec{where} has unknown keys {unknown}; known keys: {sorted(known)}")
        try:
            checked = TaskSpecSchema.model_validate(raw)
        except pydantic.ValidationError as exc:
            raise ConfigError(schema_problem(exc, source or "(given as a mapping)")) from None
        # the task and split names become PREP_DIR folder names: refused here, before anything is read
        origin = f"task YAML {source}" if source else "a task spec"
        check_name(checked.task, "task name", origin)
        for key in ("validation_split", "test_split"):
            if raw.get(key) is not None:
                check_name(raw[key], f"{key} name", origin)
        kwargs = {k: v for k, v in checked.model_dump().items() if k in raw}
        kwargs["metric_list"] = tuple(raw.get("metric_list") or ())
        for key in ("dataset_kwargs", "generation_kwargs", "metadata", "label_values"):
            kwargs[key] = dict(raw.get(key) or {})
        for key in ("doc_to_choice", "dataset_aliases", "group_by", "tsv_columns", "attribution_fields",
                    "report_by"):
            if kwargs.get(key) is not None:
                kwargs[key] = tuple(kwargs[key])
        kwargs["doc_to_target"] = str(kwargs["doc_to_target"])
        spec = cls(**kwargs, source=source)
        spec._check_templates()
        return spec

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> TaskSpec:
        path = Path(path)
        # a FIFO, a device or a huge file is refused unread (``--tasks /dev/zero`` would never end)
        text = decode_utf8(read_regular_file(path, "task spec", MAX_TASK_FILE_BYTES), path, "task spec")
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" (line {mark.line + 1})" if mark is not None else ""
            raise ConfigError(f"cannot read task spec {path}: not valid YAML{at}: "
                              f"{getattr(exc, 'problem', None) or exc}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"task spec {path} is not a YAML mapping")
        return cls.from_dict(raw, source=str(path))

    @classmethod
    def builtin(cls, name: str) -> TaskSpec:
        """A task spec shipped with tcqa-data (``mc_taco``, ``squad_completion``)."""
        names = builtin_task_names()
        if name not in names:
            raise ConfigError(f"unknown task {name!r}; built-in tasks: {names}, or pass a YAML file path")
        ref = resources.files("tcqa_data.prep") / "tasks" / f"{name}.yaml"
        return cls.from_yaml(str(ref))

    @classmethod
    def resolve(cls, name_or_path: str) -> TaskSpec:
        """A built-in task name, or a path to a task YAML."""
        if is_task_yaml_path(name_or_path):
            return cls.from_yaml(name_or_path)
        return cls.builtin(name_or_path)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in self.__dataclass_fields__:
            if key == "source":
                continue
            value = getattr(self, key)
            if isinstance(value, tuple):
                value = list(value)
            if value in (None, (), [], {}):
                continue
            out[key] = value
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)

    # ---- templates ----------------------------------------------------------------------
    def _templates(self) -> dict[str, str]:
        out = {"doc_to_text": self.doc_to_text, "doc_to_target": self._target_template}
        if self.doc_to_decontamination_query:
            out["doc_to_decontamination_query"] = self.doc_to_decontamination_query
        if self.memorization_text and self.memorization_text not in out:
            out["memorization_text"] = self.memorization_text
        return out

    @cached_property
    def _target_template(self) -> str:
        # lm-eval: a bare field name (`label`) means that field's value.
        t = self.doc_to_target
        return t if "{{" in t or "{%" in t else "{{" + t + "}}"

    def _where(self, name: str) -> str:
        return f"task {self.task!r}" + (f" ({self.source})" if self.source else "") + f": template {name}"

    def _check_templates(self) -> None:
        """Every template a string within its budget that parses, reading no ``_`` attribute."""
        for name, template in self._templates().items():
            check_source(template, where=self._where(name))

    def check_templates_on(self, docs: Iterable[dict[str, Any]]) -> list[str]:
        """Render every template of this task (prompt, target, query, memorization text) on each doc in
        the sandbox, within its budgets, and return the docs' decontamination queries: what
        decontaminate exports and evaluate renders has passed here, and a refusal is one line naming
        the file and the template."""
        names = list(self._templates())
        query = "doc_to_decontamination_query" if self.doc_to_decontamination_query else "doc_to_text"
        queries = []
        clock = RenderClock(f"task {self.task!r}" + (f" ({self.source})" if self.source else ""))
        for doc in docs:
            for name in names:
                text = self._render(name, doc)
                clock.tick()
                if name == query:
                    queries.append(text)
        return queries

    def template_fields(self, template_name: str) -> list[str]:
        """The doc fields a template reads, in order of first use."""
        template = self._templates()[template_name]
        ast = _ENV.parse(template)
        found = jinja2.meta.find_undeclared_variables(ast)
        # keep the order in which the fields appear in the template text
        return sorted(found, key=lambda f: template.find(f))

    def required_fields(self) -> list[str]:
        fields: list[str] = []
        for name in self._templates():
            for f in self.template_fields(name):
                if f not in fields:
                    fields.append(f)
        for f in self.group_by:
            if f not in fields:
                fields.append(f)
        return fields

    def _render(self, template_name: str, doc: dict[str, Any]) -> str:
        template = self._templates()[template_name]
        try:
            return render(template, doc, where=self._where(template_name))
        except jinja2.UndefinedError as exc:
            raise ConfigError(
                f"{self._where(template_name)} ({template!r:.200}) uses a field the doc "
                f"lacks: {exc.message}; doc fields: {sorted(doc)}"
            ) from exc

    def text(self, doc: dict[str, Any]) -> str:
        return self._render("doc_to_text", doc)

    def target(self, doc: dict[str, Any]) -> str:
        return self._render("doc_to_target", doc)

    def target_index(self, doc: dict[str, Any]) -> int:
        """For multiple_choice: the index of the gold choice."""
        value = self.target(doc).strip()
        choices = self.choices(doc)
        if value.lstrip("-").isdigit():
            return int(value)
        if value in choices:
            return choices.index(value)
        raise ConfigError(f"task {self.task!r}: target {value!r} is neither an index nor one of {choices}")

    def choices(self, doc: dict[str, Any] | None = None) -> list[str]:
        if self.doc_to_choice is None:
            raise ConfigError(f"task {self.task!r} has no doc_to_choice")
        return list(self.doc_to_choice)

    def decontamination_query(self, doc: dict[str, Any]) -> str:
        """lm-eval's rule: the query template if given, else the prompt text."""
        if self.doc_to_decontamination_query:
            return self._render("doc_to_decontamination_query", doc)
        return self.text(doc)

    def memorization_query_template(self) -> str:
        """The name of the template that renders the memorization ``query``: ``memorization_text``
        (a template name, or its own template), else the decontamination query's (lm-eval's rule:
        the query template if given, else the prompt)."""
        m = self.memorization_text or "doc_to_decontamination_query"
        if m == "doc_to_decontamination_query" and not self.doc_to_decontamination_query:
            return "doc_to_text"
        return m if m in self._templates() else "memorization_text"

    def memorization_query(self, doc: dict[str, Any]) -> str:
        """The ``query`` text of the memorization scores: ``memorization_text`` if set (a template
        name or a template), else the decontamination query."""
        return self._render(self.memorization_query_template(), doc)

    def fields_only(self, template_name: str) -> bool:
        """True where the template is nothing but its fields and whitespace (rendered with every
        field empty it is blank): its text is then located field by field in another rendering."""
        blank = dict.fromkeys(self.template_fields(template_name), "")
        try:
            return not self._render(template_name, blank).strip()
        except (ConfigError, jinja2.TemplateError):
            return False

    def memorization_texts(self, doc: dict[str, Any]) -> dict[str, str]:
        """TEXT name -> text scored for memorization: ``query`` and each attribution field the doc has
        (so the model-side scores line up with the field-level corpus evidence)."""
        out = {"query": self.memorization_query(doc)}
        for f in self.query_fields():
            if doc.get(f) is not None and f != "query":
                out[f] = str(doc[f])
        return out

    def label_field(self) -> str | None:
        """The field a bare-name ``doc_to_target`` reads (MC-TACO: ``label``), else None."""
        t = self.doc_to_target.strip()
        return t if t.isidentifier() else None

    def query_fields(self) -> list[str]:
        """The fields matches in the decontamination query are attributed to."""
        if self.attribution_fields:
            return list(self.attribution_fields)
        name = "doc_to_decontamination_query" if self.doc_to_decontamination_query else "doc_to_text"
        return self.template_fields(name)

    def splits(self) -> dict[str, str]:
        """Role -> split name, for the splits the task declares."""
        out = {}
        if self.validation_split:
            out["validation"] = self.validation_split
        if self.test_split:
            out["test"] = self.test_split
        return out


def is_task_yaml_path(name_or_path: str) -> bool:
    """True where a task is given as a path to its YAML (a .yaml/.yml name or a path), not a name."""
    return name_or_path.endswith((".yaml", ".yml")) or os.path.sep in name_or_path


def is_tcqa_task(name_or_path: str) -> bool:
    """True for a built-in task name or a task YAML path; other names are lm-eval tasks."""
    return is_task_yaml_path(name_or_path) or name_or_path in builtin_task_names()


def builtin_task_names() -> list[str]:
    folder = resources.files("tcqa_data.prep") / "tasks"
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))
