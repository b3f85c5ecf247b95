"""A PaDIR chapter run folder, as the later chapters (stutter analysis, ablations) read it.

The PaDIR chapter (``notebooks/padir.md``) leaves in ``<run_root>/<src>-<tgt>/``: ``spm.model``
(the joint vocabulary), ``ar/`` (the AR teacher), ``distilled.<tgt>.gz`` (the teacher's beam
outputs on the training set, one a line), ``padir_raw/`` and ``padir_distilled/`` (training run
folders, see :mod:`gmlm_lib.mt.training`). :mod:`gmlm_lib.mt.pipeline` makes one; :func:`open_run`
loads it; :func:`gmlm_lib.mt.pipeline.tiny_run` trains a few-step stand-in with the same layout, for smoke
runs and tests. :func:`distil` writes (or reuses) the distilled training set with a record of how and
where it was decoded.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import pathlib
import time

from gmlm_lib.core import records
from gmlm_lib.core.progress import bar as progress_bar
from gmlm_lib.mt import corpus, runfolder, seq2seq, training, translate
from gmlm_lib.mt import vocab as V

#: The trained models of a run folder, by subfolder name.
MODELS = ("ar", "padir_raw", "padir_distilled")
#: Models a run folder may hold besides :data:`MODELS` (loaded when present): the deep-shallow AR baseline.
OPTIONAL = ("ar_shallow",)
#: How the book names each model of a run folder (the PaDIR chapter's tables and the provenance page).
LABELS = {"ar": "AR teacher", "padir_raw": "PaDIR raw", "padir_distilled": "PaDIR distilled",
          "ar_shallow": "AR deep-shallow"}


@dataclasses.dataclass
class RunFolder:
    """``models[name] = (config, model)`` and ``records[name]`` (its ``run.json``) for the models
    found, the model replica 0's when the run trained replicas (``config.replicas``), and
    ``replicas[name]`` every replica's model in order (one item for a lone run); ``distilled`` the
    teacher's outputs (or ``None``) and ``distilled_record`` how and where they were decoded (its
    record, :func:`distil`; ``None`` without them)."""

    root: pathlib.Path
    vocab: V.Vocab
    models: dict[str, tuple[training.TrainConfig, seq2seq.Seq2Seq]]
    records: dict[str, dict]
    distilled: list[str] | None
    distilled_record: dict | None = None
    replicas: dict[str, list[seq2seq.Seq2Seq]] = dataclasses.field(default_factory=dict)


def open_run(root: str | pathlib.Path, need=MODELS) -> RunFolder:
    """Load the run folder ``root`` (``.../<src>-<tgt>``). Every name in ``need`` must be there
    (one of :data:`MODELS`, or ``"distilled"``); others are loaded when present."""
    root = pathlib.Path(root)
    how = ("produce it with the PaDIR chapter: papermill notebooks/padir.ipynb out.ipynb -p run_root "
           "<folder> (it writes <folder>/<src>-<tgt>/), then pass that folder here")
    if root.exists() and not root.is_dir():
        raise runfolder.RunFolderError(f"{root} is a file, not a run folder; pass the folder that holds spm.model and "
                                       f"the models' folders ({', '.join(MODELS)}).")
    if not (root / "spm.model").is_file():
        raise FileNotFoundError(f"run folder {str(root)!r} has no spm.model; {how}.")
    unknown = set(need) - set(MODELS + OPTIONAL) - {"distilled"}
    if unknown:
        raise ValueError(f"open_run(need=...): unknown part(s) {sorted(unknown)}; choose from "
                         f"{MODELS + OPTIONAL + ('distilled',)}.")
    models, records, replicas = {}, {}, {}
    for name in MODELS + OPTIONAL:
        ckpt = root / name / "checkpoints"
        if not ckpt.is_dir() or not any(ckpt.iterdir()):
            if name in need:
                raise FileNotFoundError(f"run folder {str(root)!r} has no trained {name!r} model; {how}.")
            continue
        cfg, replicas[name] = training.load_replicas(root / name)
        models[name] = (cfg, replicas[name][0])
        records[name] = runfolder.read_json(root / name / "run.json", f"the {name!r} model's provenance record")
    found = sorted(root.glob("distilled.*.gz"))
    if not found and "distilled" in need:
        raise FileNotFoundError(f"run folder {str(root)!r} has no distilled.<tgt>.gz; {how}.")
    distilled = corpus.read_lines(found[0]) if found else None
    distilled_record = (runfolder.read_json(_record_path(found[0]), "the record of the distilled targets")
                        if found else None)
    vocab = V.Vocab.load(root / "spm.model")
    for name, (cfg, _) in models.items():
        if cfg.model.vocab != vocab.size:
            raise runfolder.RunFolderError(
                f"{root / 'spm.model'} has {vocab.size:,} pieces but the {name!r} model in {root / name} was built for "
                f"{cfg.model.vocab:,}: the vocabulary is not the one the model was trained with (a folder assembled "
                "from two runs?); put back the run's own spm.model, or train the models again in a new folder.")
    return RunFolder(root, vocab, models, records, distilled, distilled_record, replicas)


def _record_path(path: pathlib.Path) -> pathlib.Path:
    """Where :func:`distil` keeps the record of the targets in ``path``: ``distilled.de.gz`` ->
    ``distilled.json``."""
    return path.with_name(path.name.split(".")[0] + ".json")


@dataclasses.dataclass
class Distilled:
    """The teacher's outputs (``lines[i]`` translates source ``i``), the ``record`` of the decoding
    (``method``, ``wall_s``, ``sentences``, ``commit``, ``hardware``) and whether the file was
    ``reused`` rather than decoded now."""

    lines: list[str]
    record: dict
    reused: bool


def distil(translator: translate.Translator, sources: list[str], method: translate.Method,
           path: str | pathlib.Path, *, batch_size: int = 128, fallback: list[str] | None = None,
           progress: bool = True) -> Distilled:
    """Sequence-level distillation [App. L.1.2]: the teacher ``translator`` decodes ``sources`` with
    ``method`` into ``path`` (gzipped, one line each), with a record beside it (``distilled.de.gz``
    gets ``distilled.json``: method, wall time, sentence count, gmlm_lib commit, hardware).

    When ``path`` and its record exist they are reused (a resumed run does not decode again), but
    only if they were decoded with the same ``method`` from as many sentences as ``sources``;
    otherwise a ``ValueError`` names the file. ``fallback[i]`` (e.g. the human target) replaces an
    empty output of a barely trained teacher. Both files are written whole (a temporary file,
    then a rename), so an interrupted decoding leaves nothing to be reused."""
    path = pathlib.Path(path)
    record_path = _record_path(path)
    want = dataclasses.asdict(method)
    if fallback is not None and len(fallback) != len(sources):
        raise ValueError(f"distil(fallback=...): {len(fallback):,} lines for {len(sources):,} sources; "
                         "pass one per source.")
    if path.exists():
        if not record_path.exists():
            raise ValueError(f"{path} has no record {record_path.name} (an older or interrupted run?); "
                             "delete the file to decode again.")
        record = runfolder.read_json(record_path, "the record of the distilled targets",
                                     fix=f"delete {path.name} and {record_path.name} to decode again.")
        if record.get("method") != want or record["sentences"] != len(sources):
            raise ValueError(f"{path} was decoded with {record['method']} from {record['sentences']:,} sentences, "
                             f"not with {want} from {len(sources):,}: use another run folder, or delete the file "
                             "to decode again.")
        lines = corpus.read_lines(path)
        if len(lines) != len(sources):
            raise ValueError(f"{path} has {len(lines):,} lines but its record says {record['sentences']:,}; "
                             "delete it to decode again.")
        return Distilled(lines, record, reused=True)
    commit = records.git_commit()  # the code that decodes, not whatever HEAD is when it ends
    t0 = time.perf_counter()
    with progress_bar(progress=progress, total=len(sources), desc="distil", leave=False) as bar:
        lines = translator.translate(sources, method, batch_size=batch_size, progress=bar)
    wall_s = time.perf_counter() - t0
    lines = [line.replace("\n", " ") for line in lines]
    if fallback is not None:
        lines = [line if line.strip() else human for line, human in zip(lines, fallback)]
    record = dict(method=want, wall_s=wall_s, sentences=len(lines), commit=commit,
                  hardware=records.hardware_summary())
    tmp = path.with_name(path.name + ".part")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    records.write_record(record_path, record)
    os.replace(tmp, path)
    return Distilled(lines, record, reused=False)
