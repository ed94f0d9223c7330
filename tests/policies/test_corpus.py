import hashlib

import pytest

from policies.corpus import build_corpus

# sha256 of the corpus built from envs.tasks.micro.corpus_texts(): cached tokenizers (and the sizes
# LEARNING.md measured) were built from exactly this text. Change it on purpose only, with
# policies.corpus.CORPUS_VERSION.
MICRO_CORPUS_SHA256 = "8db8dbe8d82071dba64708422303b4f45e7442c27d6dbbcbafb7c31360bf38dd"


def _sha256(corpus: list[str]) -> str:
    return hashlib.sha256("\x00".join(corpus).encode()).hexdigest()


def test_the_micro_tasks_corpus_is_unchanged(task_texts):
    corpus = build_corpus(task_texts)
    assert len(corpus) == 12000 and _sha256(corpus) == MICRO_CORPUS_SHA256


def test_the_task_texts_are_in_the_corpus(task_texts):
    corpus = set(build_corpus(task_texts))
    for kind, texts in zip(("issue", "module", "tests"), zip(*task_texts)):
        assert corpus & set(texts), kind
    # Outputs that solve a task name its function: the issue's first word.
    failed = {doc.split("::test_", 1)[1].split("_bug", 1)[0] for doc in corpus if doc.startswith("exit code: 1")}
    assert failed and failed <= {issue.split(" ", 1)[0] for issue, *_ in task_texts}
    assert _sha256(build_corpus(task_texts[:50])) != MICRO_CORPUS_SHA256


def test_no_task_texts_is_refused():
    for texts in ([], [[]]):
        with pytest.raises(ValueError, match="one non-empty list per task"):
            build_corpus(texts)
