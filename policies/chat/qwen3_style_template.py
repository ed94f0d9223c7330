"""A chat template that renders conversations the way Qwen3's does, written here so that the
token-exactness checks need no Hub download.

It follows Qwen3's behaviour where it matters for rendering incrementally: tools in the system
turn, `<tool_call>` JSON, tool results as `<tool_response>` blocks sharing one user turn, and
reasoning. An assistant turn after the last real user query shows its reasoning in a
`<think>` block (an empty one when it is the final message and has none); earlier turns lose
theirs, and an assistant turn stops being final as soon as anything follows it. Like Qwen3, it
has no developer role: such messages are left out. Its wording is its own.
"""
from __future__ import annotations

QWEN3_STYLE_TEMPLATE = r"""
{%- set first_is_system = messages[0].role == 'system' %}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if first_is_system %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- '# Tools\n\nFunctions you may call, as JSON schemas inside <tools></tools>:\n<tools>' }}
    {%- for tool in tools %}
        {{- '\n' + tool | tojson }}
    {%- endfor %}
    {{- '\n</tools>\n\nCall one with its name and arguments as JSON inside <tool_call></tool_call>:\n'
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif first_is_system %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{#- The last user message that is a query, not tool results passed back as user text. #}
{%- set state = namespace(last_query=messages | length - 1) %}
{%- for message in messages %}
    {%- set text = message.content if message.content is string else '' %}
    {%- if message.role == 'user' and not (text.startswith('<tool_response>') and text.endswith('</tool_response>')) %}
        {%- set state.last_query = loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set text = message.content if message.content is string else '' %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + text + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {%- if message.reasoning_content is string %}
            {%- set thought = message.reasoning_content %}
        {%- elif '</think>' in text %}
            {%- set thought = text.split('</think>')[0].split('<think>')[-1].strip('\n') %}
            {%- set text = text.split('</think>')[-1].lstrip('\n') %}
        {%- else %}
            {%- set thought = '' %}
        {%- endif %}
        {{- '<|im_start|>assistant\n' }}
        {%- if loop.index0 > state.last_query and (loop.last or thought) %}
            {{- '<think>\n' + thought.strip('\n') + '\n</think>\n\n' + text.lstrip('\n') }}
        {%- else %}
            {{- text }}
        {%- endif %}
        {%- for call in message.tool_calls or [] %}
            {%- set call = call.function if call.function is defined else call %}
            {%- if text or not loop.first %}
                {{- '\n' }}
            {%- endif %}
            {{- '<tool_call>\n{"name": "' + call.name + '", "arguments": ' }}
            {{- call.arguments if call.arguments is string else call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + text + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""
