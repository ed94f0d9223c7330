"""The policy's tokenizer: a real checkpoint's, or a byte-level BPE trained offline.

Either way it is loaded with AutoTokenizer, so the rest of the code cannot tell them apart.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import List, Optional, Sequence

import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from configs.schema import TokenizerConfig
from policies.cache_dir import build_once, content_hash
from policies.chat.chat_tokenizer import IM_END, IM_START, PAD_TOKEN
from policies.corpus import CORPUS_VERSION, HarnessVocabulary, build_corpus

SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END]
# The lines CHAT_TEMPLATE writes around any tools offered (kept in step with it by
# tests/policies/test_tokenizer.py): a harness that offers tools resends them in every request.
TOOLS_BLOCK_LINES = (
    "You can call the functions below. Their JSON schemas are inside <tools></tools>:\n",
    "To call one, answer with a JSON object holding its name and arguments inside <tool_call></tool_call> tags:\n",
    '{"name": <function-name>, "arguments": <args-json-object>}\n',
)
# A harness's line shorter than this stays with the BPE: the saving is small and short lines
# (`EOF`, a lone brace) would match inside the agent's own text.
MIN_PHRASE_CHARS = 12
# Bounds what one harness adds to the vocabulary (and so to the model's embedding).
MAX_PHRASES = 512
# Any one of these makes a directory loadable by AutoTokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")

# ChatML, as Qwen uses it, with Qwen3's tool-calling format. Messages without tools, tool calls,
# tool results, reasoning or developer turns render exactly as plain ChatML: Conversation appends
# turns by hand, and models trained on them depend on it. A developer message renders as a system
# turn: OpenAI clients send it where they used to send system, and the model knows no other role
# for instructions (Qwen3's own template has no developer branch and would drop it). Reasoning,
# when given, is kept in every turn (Qwen3 drops earlier turns'), so that sessions stay incremental.
CHAT_TEMPLATE = r"""
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role in ('system', 'developer') and messages[0].content is string %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- '# Tools\n\nYou can call the functions below. Their JSON schemas are inside <tools></tools>:\n<tools>' }}
    {%- for tool in tools %}
        {{- '\n' + tool | tojson }}
    {%- endfor %}
    {{- '\n</tools>\n\nTo call one, answer with a JSON object holding its name and arguments inside '
        '<tool_call></tool_call> tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
        '\n</tool_call><|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.content is defined and message.content is not none and message.content is not string %}
        {{- raise_exception('message content must be a string (join the text parts first), got: ' + message.content | string) }}
    {%- endif %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if loop.first and tools and message.role in ('system', 'developer') %}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + ('system' if message.role == 'developer' else message.role) + '\n' }}
        {%- if message.role == 'assistant' and message.reasoning_content is string and message.reasoning_content %}
            {{- '<think>\n' + message.reasoning_content + '\n</think>\n\n' }}
        {%- endif %}
        {{- content }}
        {%- if message.role == 'assistant' and message.tool_calls %}
            {%- for call in message.tool_calls %}
                {%- set call = call.function if call.function is defined else call %}
                {%- if content or not loop.first %}
                    {{- '\n' }}
                {%- endif %}
                {{- '<tool_call>\n{"name": ' + call.name | tojson + ', "arguments": ' }}
                {{- call.arguments if call.arguments is string else call.arguments | tojson }}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""


def ensure_tokenizer(cfg: TokenizerConfig, task_texts: Sequence[Sequence[str]],
                     harness: Optional[HarnessVocabulary] = None) -> str:
    """Return a directory AutoTokenizer can load, training and caching one if needed.

    `task_texts` (one list of texts per training task, the issue first; see
    policies.corpus.build_corpus) join the corpus; unused when cfg.path names a tokenizer.
    `harness` (the fixed texts of the agent harness the run trains) joins the corpus too, and each
    of its lines becomes one token (harness_phrases): a harness resends them in every request.
    The cache key holds the corpus's hash and the phrases, so other texts train (and cache) another tokenizer.
    The built-in corpus runs out of merges near 5,500 tokens, so a larger vocab_size
    yields a smaller vocabulary; the model is sized by len(tokenizer), never by the config.
    """
    if cfg.path:
        if not os.path.isdir(cfg.path):
            raise FileNotFoundError(
                f"tokenizer.path: no tokenizer directory at {cfg.path!r}; set tokenizer.path to a directory "
                "holding tokenizer.json or tokenizer_config.json, or leave it empty to train the tiny tokenizer")
        return cfg.path
    corpus = build_corpus(task_texts, harness)
    phrases = harness_phrases(harness) if harness is not None else []
    key = content_hash({
        "kind": "byte_level_bpe",
        "vocab_size": cfg.vocab_size,
        "special_tokens": SPECIAL_TOKENS,
        "chat_template": CHAT_TEMPLATE,
        "corpus_version": CORPUS_VERSION,
        "corpus_sha256": hashlib.sha256("\x00".join(corpus).encode()).hexdigest(),
        "tokenizers_version": tokenizers.__version__,
        **({"phrases": phrases} if phrases else {}),
    })
    final_dir = os.path.join(os.path.expanduser(cfg.cache_dir), "tokenizers", key)
    return build_once(final_dir, lambda tmp_dir: _train(cfg.vocab_size, corpus, phrases, tmp_dir))


def harness_phrases(harness: HarnessVocabulary) -> List[str]:
    """The harness's lines that become whole tokens: each line of its texts (newline kept) of at
    least MIN_PHRASE_CHARS and, when it offers tools, the chat template's lines around them, each
    tool schema as the template renders it, and the opening of a call to each tool. First seen first; more than MAX_PHRASES is refused.

    Why whole lines: the byte-level pre-tokenizer never merges across words, so no vocabulary
    makes mini-swe-agent's ~780 words of instance template cost fewer than ~780 tokens; as lines it
    is ~90, and the task's own words sit that much closer to the policy's reply."""
    lines = [line for text in harness.texts for line in text.splitlines(keepends=True)
             if len(line.strip()) >= MIN_PHRASE_CHARS]
    if harness.tools:
        lines += TOOLS_BLOCK_LINES
    for tool in harness.tools:
        # CHAT_TEMPLATE: `tool | tojson` in the tools block, and a call's fixed opening.
        lines.append(json.dumps(tool, ensure_ascii=False))
        lines.append('<tool_call>\n{"name": ' + json.dumps(tool["function"]["name"], ensure_ascii=False)
                     + ', "arguments": ')
    phrases = list(dict.fromkeys(lines))
    if len(phrases) > MAX_PHRASES:
        raise ValueError(f"the harness's texts hold {len(phrases)} distinct lines; at most {MAX_PHRASES} become "
                         "tokens: trim the texts handed to the tokenizer (envs/harness_texts.py)")
    return phrases


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    # A missing directory would be taken for a Hub repository id (a network error, or a download).
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no tokenizer directory at {path!r}; set tokenizer.path to a directory "
                                "holding tokenizer.json or tokenizer_config.json")
    if not any(os.path.isfile(os.path.join(path, name)) for name in TOKENIZER_FILES):
        raise FileNotFoundError(f"{path!r} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                                "set tokenizer.path to a tokenizer directory")
    return AutoTokenizer.from_pretrained(path)


def _train(vocab_size: int, corpus: list[str], phrases: list[str], out_dir: str) -> None:
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        # Every byte is a token, so any text (and any generated id sequence) round-trips.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer=trainer)
    # Matched in the raw text before the byte-level split, so a whole line is one id.
    bpe.add_tokens([AddedToken(phrase, normalized=False, special=False) for phrase in phrases])
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        pad_token=PAD_TOKEN,
        eos_token=IM_END,
        additional_special_tokens=[IM_START],
        model_max_length=1 << 20,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(out_dir)
