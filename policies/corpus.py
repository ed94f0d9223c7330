"""Built-in text the offline tokenizer is trained on.

The BPE merges should fit what the agent actually reads and writes: shell commands,
Python source, pytest output and English issue text, and the texts of the tasks it will be
trained on. Those come in as an argument (`build_corpus(task_texts)`): policies never import
envs, so whoever knows both (actors/stages/policy_setup.py) hands `envs.tasks.micro.corpus_texts()` across.
A run that trains an agent harness also hands across the harness's fixed texts (HarnessVocabulary:
its templates' literal parts and its tool schemas): the corpus then holds them, the JSON the harness
wraps commands and outputs in, and the tool calls the policy answers with.
The generator is deterministic (fixed seed, no hash-ordered containers) so the same texts
always yield the same corpus, the same tokenizer and the same cache key.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

# Bump when the generator changes, so cached tokenizers are rebuilt.
CORPUS_VERSION = 3
_SEED = 0
# Enough distinct words for every merge of a 4096-token vocabulary; trains in ~1 s.
_NUM_DOCUMENTS = 12000

_FILES = ["calc.py", "test_calc.py", "utils.py", "test_utils.py", "core.py", "README.md",
          "setup.py", "src/app/main.py", "tests/test_main.py", "lib/parser.py"]
_NAMES = ["total", "count", "value", "items", "index", "result", "data", "name", "path",
          "size", "limit", "start", "end", "key", "config", "line", "text", "numbers"]
_FUNCS = ["add", "subtract", "mean", "clamp", "parse", "is_even", "find_max", "merge",
          "normalize", "tokenize", "load", "save", "split_words", "count_items", "area"]
_OPS = ["<", "<=", ">", ">=", "==", "!=", "+", "-", "*", "//", "%"]
_WORDS = ("the function returns the wrong value when called with an empty list and it "
          "should return zero instead of raising an error please fix the bug so that all "
          "tests pass expected got but instead when input is negative off by one in range "
          "loop boundary incorrect result wrong operator swapped arguments constant should "
          "be this breaks the build after the last change reproduce with steps a about above "
          "across actually add after again against all almost already also although always "
          "among another answer any anyone anything appear apply around ask attempt available "
          "back bad because become before begin behavior behind believe below better between "
          "both bring buffer cache call case cause certain change check clear close code column "
          "come command common compare complete condition consider contain context continue "
          "correct could create current date default define delete describe detail different "
          "directory do does done down during each early edit either else enough entry "
          "environment every example exception exist explain fail false feature field file "
          "final find first fix follow format found from full get give given go good group "
          "handle happen have help here high hold how however if import include index "
          "information inside install instead into issue item keep kind know large last later "
          "leave left length level library line little local long look lower main make many "
          "match maybe mean message method might missing mode module more most move much must "
          "name need never new next no none not note nothing now number object often old once "
          "only open option order other output over package parameter part pass path pattern "
          "place point possible print problem process program project provide python question "
          "raise read reason record remove repeat replace report request require return right "
          "run same save second see seem set several show side simple since single size small "
          "some something source space start state still stop string such support sure system "
          "table take test text than that their then there these thing think those though "
          "through time together too try turn type under understand until update upper use "
          "used user using valid variable version very view want way well what where whether "
          "which while who why will within without word work would write yet you your").split()
# Identifiers are built from parts, as real code names are (snake_case and CamelCase).
_VERBS = ("get set add remove find load save parse build make read write check compute update "
          "create delete format convert validate merge split sort filter count apply").split()
_NOUNS = ("value item key name path file line text token user config result index node tree "
          "list dict table row column record entry buffer cache state event task job queue "
          "score total size limit offset range error message request response data").split()
_ISSUES = [
    "`{f}` returns the wrong result: `{f}({a}, {b})` should be {c} but it returns {d}.",
    "Calling {f}() with an empty list raises IndexError instead of returning 0.",
    "The comparison in `{f}` uses `{o1}` but it should use `{o2}`.",
    "Off-by-one error in `{f}`: the loop stops one element early (range({a}) vs range({b})).",
    "In {file}, line {n}: `{v}` should be `{w}`. Please fix the bug so the tests pass.",
]


def _command(rng: random.Random) -> str:
    f = rng.choice(_FILES)
    n = rng.randint(1, 120)
    a, b = rng.choice(_NAMES), rng.choice(_NAMES)
    forms = [
        f"cat {f}",
        f"cat -n {f}",
        f"sed -n '{n},{n + rng.randint(1, 30)}p' {f}",
        f"sed -i '{n}s/{a}/{b}/' {f}",
        f"sed -i 's/{rng.choice(_OPS)}/{rng.choice(_OPS)}/' {f}",
        f"grep -n '{rng.choice(_FUNCS)}' {f}",
        f"grep -rn \"def {rng.choice(_FUNCS)}\" .",
        "python -m pytest -q",
        f"python -m pytest -q {f} -x",
        "python -m pytest -q -k " + rng.choice(_FUNCS),
        "ls", "ls -la", f"ls {f.rsplit('/', 1)[0] if '/' in f else '.'}",
        f"head -n {n} {f}", f"tail -n {n} {f}", "git diff", "git status",
        f"python -c 'import {f.split('/')[-1][:-3]}; print({rng.randint(0, 99)})'",
        "submit",
    ]
    return rng.choice(forms)


def _identifier(rng: random.Random) -> str:
    verb, noun = rng.choice(_VERBS), rng.choice(_NOUNS)
    return rng.choice([f"{verb}_{noun}", f"{noun}s", f"_{noun}", f"{verb.title()}{noun.title()}",
                       f"{noun}_{rng.choice(_NOUNS)}", f"{verb}_{noun}_{rng.randint(1, 9)}"])


def _python(rng: random.Random) -> str:
    f, a, b = rng.choice(_FUNCS + [_identifier(rng)]), rng.choice(_NAMES), _identifier(rng)
    o = rng.choice(_OPS)
    k = rng.randint(0, 10)
    return rng.choice([
        f"def {f}({a}, {b}):\n    return {a} {o} {b}\n",
        f"def {f}({a}):\n    {b} = 0\n    for i in range(len({a})):\n        {b} += {a}[i]\n"
        f"    return {b}\n",
        f"def {f}({a}):\n    if not {a}:\n        return {k}\n    return max({a})\n",
        f"import os\nimport sys\n\n\nclass {f.title().replace('_', '')}:\n"
        f"    def __init__(self, {a}={k}):\n        self.{a} = {a}\n",
        f"def test_{f}():\n    assert {f}({k}, {k + 1}) == {k * 2 + 1}\n",
        f"from calc import {f}\n\n\ndef test_{f}_empty():\n    assert {f}([]) == 0\n",
        f"    if {a} {o} {b}:\n        raise ValueError(\"bad {a}: %r\" % ({a},))\n",
    ])


def _pytest_output(rng: random.Random) -> str:
    passed, failed = rng.randint(0, 12), rng.randint(0, 3)
    f, func = rng.choice(_FILES), rng.choice(_FUNCS)
    if failed == 0:
        return f"{'.' * passed}{' ' * 3}[100%]\n{passed} passed in 0.0{rng.randint(1, 9)}s\n"
    got, want = rng.randint(-5, 50), rng.randint(-5, 50)
    return (
        f"{'.' * passed}F{'.' * rng.randint(0, 3)}  [100%]\n"
        f"=================================== FAILURES ===================================\n"
        f"________________________________ test_{func} _________________________________\n\n"
        f"    def test_{func}():\n>       assert {func}({got}) == {want}\n"
        f"E       assert {got} == {want}\n"
        f"E        +  where {got} = {func}({got})\n\n{f}:{rng.randint(1, 80)}: AssertionError\n"
        f"=========================== short test summary info ============================\n"
        f"FAILED {f}::test_{func} - assert {got} == {want}\n"
        f"{failed} failed, {passed} passed in 0.{rng.randint(10, 99)}s\n"
    )


def _issue(rng: random.Random) -> str:
    template = rng.choice(_ISSUES)
    o1, o2 = rng.sample(_OPS, 2)
    text = template.format(
        f=rng.choice(_FUNCS), a=rng.randint(0, 9), b=rng.randint(0, 9), c=rng.randint(0, 20),
        d=rng.randint(0, 20), o1=o1, o2=o2, file=rng.choice(_FILES), n=rng.randint(1, 99),
        v=rng.choice(_NAMES), w=rng.choice(_NAMES),
    )
    prose = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 25)))
    return f"{text} {prose.capitalize()}.\n"


def _prose(rng: random.Random) -> str:
    sentences = []
    for _ in range(rng.randint(1, 4)):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 16))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), f"`{_identifier(rng)}()`")
        if rng.random() < 0.5:
            words.append(str(rng.randint(0, 9999)))
        sentences.append(" ".join(words).capitalize() + rng.choice([".", ".", "?", ":"]))
    return " ".join(sentences) + "\n"


def _reply(rng: random.Random) -> str:
    thought = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12)))
    return f"THOUGHT: {thought}\n\n```bash\n{_command(rng)}\n```"


def _task_document(rng: random.Random, tasks: Sequence[Sequence[str]]) -> str:
    """A task's own text (issue, module, tests) or a command or output that solves one: what
    the agent reads and writes on those tasks. The issue is each task's first text and starts
    with the name of the function to fix."""
    texts = rng.choice(tasks)
    name = texts[0].split(" ", 1)[0]
    return rng.choice([
        *texts,
        f"```bash\ngrep -n -A{rng.randint(1, 6)} 'def {name}(' mod.py\n```",
        "```bash\npython -m pytest -qq --tb=no test_mod.py\n```",
        f"exit code: 1\ntest_mod.py {rng.choice(['.F.', 'F.', '.F', 'F..'])}\n"
        f"=========================== short test summary info ============================\n"
        f"FAILED test_mod.py::test_{name}_bug - assert {rng.randint(0, 30)} == {rng.randint(0, 30)}\n"
        f"1 failed, {rng.randint(1, 2)} passed in 0.0{rng.randint(1, 9)}s\n",
        f"exit code: 0\ntest_mod.py {'.' * rng.randint(2, 3)}\n{rng.randint(2, 3)} passed in 0.0{rng.randint(1, 9)}s\n",
    ])


@dataclass(frozen=True)
class HarnessVocabulary:
    """What an agent harness sends in every request (envs/harness_texts.py reads it)."""
    # The literal parts of its templates (system, instance, observation, format error).
    texts: Tuple[str, ...]
    # Its tool schemas, as OpenAI `tools` entries.
    tools: Tuple[dict, ...] = ()


def _harness_document(rng: random.Random, harness: HarnessVocabulary) -> str:
    """One of the harness's own texts, or what it carries between them: a command's output as a
    JSON string (how a tool-calling harness quotes it), or a tool call holding a command."""
    names = [tool["function"]["name"] for tool in harness.tools] or ["bash"]
    inner = rng.choice([_pytest_output, _python, _command])(rng)
    return rng.choice([
        *harness.texts,
        json.dumps(inner),
        json.dumps({"name": rng.choice(names), "arguments": {"command": _command(rng)}}),
        f"exit code: {rng.randint(0, 2)}\n{inner}",
    ])


def build_corpus(task_texts: Sequence[Sequence[str]], harness: Optional[HarnessVocabulary] = None) -> List[str]:
    """The tokenizer's training documents: generated shell, Python, pytest and issue text, and
    `task_texts`, one entry per task: its texts, the issue first (envs.tasks.micro.corpus_texts()).
    With `harness`, two documents in nine are its texts and what it wraps in them."""
    tasks = [list(texts) for texts in task_texts]
    if not tasks or any(not texts for texts in tasks):
        raise ValueError("build_corpus: pass the training tasks' texts, one non-empty list per task, "
                         "the issue first (e.g. envs.tasks.micro.corpus_texts())")
    if harness is not None and not harness.texts:
        raise ValueError("build_corpus: a HarnessVocabulary without texts; pass None for a run without a harness")
    rng = random.Random(_SEED)
    makers = [_command, _python, _pytest_output, _issue, _reply, _prose,
              lambda r: _task_document(r, tasks)]
    if harness is not None:
        makers += [lambda r: _harness_document(r, harness)] * 2
    return [rng.choice(makers)(rng) for _ in range(_NUM_DOCUMENTS)]
