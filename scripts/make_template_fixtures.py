#!/usr/bin/env python3
"""Renders a fixed set of conversations through the real Hugging Face chat templates with
transformers' own Jinja renderer (render_jinja_template: Jinja2's sandbox, trim_blocks,
lstrip_blocks, raise_exception) and writes tests/data/templates/*.json; tests/data/test_template_parity.cpp checks that
lmtrain's own rendering (src/data/chat_template.cpp) equals these texts byte for byte. Python is
needed only to regenerate the fixtures, never to build or test. Run it with the reference tier's
environment (scripts/setup.sh):

  ~/.cache/lmtrain/venv/bin/python3 scripts/make_template_fixtures.py

(It replaces make_template_fixtures.mjs, which rendered with @huggingface/jinja through npm; the
fixtures it writes are the same, file for file.)

Where each template string comes from (the "chat_template" entry of the model's
tokenizer_config.json on the Hugging Face Hub; copies found with the code search):
  qwen2.5: Qwen/Qwen2.5-*-Instruct (quoted whole in jacksonsc007/frugal-agent and in a vLLM
           wrapper's docstring); the non-tool branch is what plain chats exercise.
  llama3:  meta-llama/Meta-Llama-3-8B-Instruct (the same string in ggml-org/llama.cpp
           tests/test-chat-template.cpp "Llama-3" and many model cards).
  gemma2:  google/gemma-2-*-it (tokenizer_config.json of HakunaMatata888/gemma2-poem, a gemma-2-it
           fine-tune that kept Google's file); gemma-7b-it's template is the same but for the
           leading {{ bos_token }} (ggml-org/llama.cpp tests/test-chat-template.cpp).
  gemma3:  google/gemma-3-4b-it (newer Gemma: a first system message is folded into the first
           user turn), as quoted in a transformers-fixture script.
  chatml:  transformers' default ChatML template (huggingface.js packages/jinja/test/e2e.test.js
           "_base"; teknium/OpenHermes-2.5 in llama.cpp's test).
"""
import json
from pathlib import Path

from jinja2.exceptions import TemplateError
from transformers.utils.chat_template_utils import render_jinja_template

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "templates"

TEMPLATES = {
    'chatml': {
        "source": 'transformers default ChatML (huggingface.js packages/jinja/test/e2e.test.js _base)',
        "bos_token": '',
        "eos_token": '',
        "template": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    },
    'qwen2.5': {
        "source": 'Qwen/Qwen2.5-7B-Instruct tokenizer_config.json chat_template',
        "bos_token": '',
        "eos_token": '<|im_end|>',
        "template": '{%- if tools %}\n    {{- \'<|im_start|>system\\n\' }}\n    {%- if messages[0][\'role\'] == \'system\' %}\n        {{- messages[0][\'content\'] }}\n    {%- else %}\n        {{- \'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\' }}\n    {%- endif %}\n    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n    {%- for tool in tools %}\n        {{- "\\n" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n{%- else %}\n    {%- if messages[0][\'role\'] == \'system\' %}\n        {{- \'<|im_start|>system\\n\' + messages[0][\'content\'] + \'<|im_end|>\\n\' }}\n    {%- else %}\n        {{- \'<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n\' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}\n        {{- \'<|im_start|>\' + message.role + \'\\n\' + message.content + \'<|im_end|>\' + \'\\n\' }}\n    {%- elif message.role == "assistant" %}\n        {{- \'<|im_start|>\' + message.role }}\n        {%- if message.content %}\n            {{- \'\\n\' + message.content }}\n        {%- endif %}\n        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function is defined %}\n                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n            {{- \'\\n<tool_call>\\n{"name": "\' }}\n            {{- tool_call.name }}\n            {{- \'", "arguments": \' }}\n            {{- tool_call.arguments | tojson }}\n            {{- \'}\\n</tool_call>\' }}\n        {%- endfor %}\n        {{- \'<|im_end|>\\n\' }}\n    {%- elif message.role == "tool" %}\n        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}\n            {{- \'<|im_start|>user\' }}\n        {%- endif %}\n        {{- \'\\n<tool_response>\\n\' }}\n        {{- message.content }}\n        {{- \'\\n</tool_response>\' }}\n        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n            {{- \'<|im_end|>\\n\' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- \'<|im_start|>assistant\\n\' }}\n{%- endif %}\n',
    },
    'llama3': {
        "source": 'meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json chat_template',
        "bos_token": '<|begin_of_text|>',
        "eos_token": '<|eot_id|>',
        "template": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    },
    'gemma2': {
        "source": 'google/gemma-2-2b-it tokenizer_config.json chat_template (system role not supported)',
        "bos_token": '<bos>',
        "eos_token": '<eos>',
        "template": "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
    },
    'gemma3': {
        "source": 'google/gemma-3-4b-it tokenizer_config.json chat_template (system folded into the first user turn)',
        "bos_token": '<bos>',
        "eos_token": '<eos>',
        "template": '{{ bos_token }}\n{%- if messages[0][\'role\'] == \'system\' -%}\n    {%- if messages[0][\'content\'] is string -%}\n        {%- set first_user_prefix = messages[0][\'content\'] + \'\n\n\' -%}\n    {%- else -%}\n        {%- set first_user_prefix = messages[0][\'content\'][0][\'text\'] + \'\n\n\' -%}\n    {%- endif -%}\n    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = "" -%}\n    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n    {%- if (message[\'role\'] == \'user\') != (loop.index0 % 2 == 0) -%}\n        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}\n    {%- endif -%}\n    {%- if (message[\'role\'] == \'assistant\') -%}\n        {%- set role = "model" -%}\n    {%- else -%}\n        {%- set role = message[\'role\'] -%}\n    {%- endif -%}\n    {{ \'<start_of_turn>\' + role + \'\n\' + (first_user_prefix if loop.first else "") }}\n    {%- if message[\'content\'] is string -%}\n        {{ message[\'content\'] | trim }}\n    {%- elif message[\'content\'] is iterable -%}\n        {%- for item in message[\'content\'] -%}\n            {%- if item[\'type\'] == \'image\' -%}\n                {{ \'<start_of_image>\' }}\n            {%- elif item[\'type\'] == \'text\' -%}\n                {{ item[\'text\'] | trim }}\n            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n        {{ raise_exception("Invalid content type") }}\n    {%- endif -%}\n    {{ \'<end_of_turn>\n\' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{\'<start_of_turn>model\n\'}}\n{%- endif -%}\n',
    },
}


def u(role, content):
    return {"role": role, "content": content}


def sys_(c):
    return u("system", c)


def usr(c):
    return u("user", c)


def ast(c):
    return u("assistant", c)


# Conversations. "reject": True marks one lmtrain refuses whatever the template does (nothing to
# learn); Jinja may still render it.
CASES = [
    {"name": "single_turn", "messages": [usr("What is 2+2?"), ast("4")]},
    {
        "name": "system_multi_turn",
        "messages": [
            sys_("You are a terse assistant."),
            usr("Name a prime."),
            ast("7"),
            usr("Another one?"),
            ast("11, and then 13."),
        ],
    },
    {
        "name": "unicode",
        "messages": [
            usr("Traduis « bonjour » en 日本語, s'il te plaît 🙂"),
            ast("こんにちは — «konnichiwa» 👋"),
            usr("Und auf Deutsch? Ünïcödé ß"),
            ast("Guten Tag! ✓"),
        ],
    },
    {
        "name": "whitespace_edges",
        "messages": [
            usr("  \n  leading and trailing spaces and newlines \n\n"),
            ast("\t  indented answer\nwith a second line  \n"),
            usr("\u00a0no-break space edges\u3000"),
            ast(" \r\n answer with CRLF edges \r\n"),
        ],
    },
    {
        "name": "code_and_braces",
        "messages": [
            usr("Write {{ x }} and {% raw %} in Jinja"),
            ast("```jinja\n{{ x }}\n{% raw %}{{ y }}{% endraw %}\n```"),
        ],
    },
    {"name": "system_only_first_user_after", "messages": [sys_("Be kind."), usr("Hi"), ast("Hello!")]},
    {"name": "ends_with_user", "messages": [usr("a"), ast("b"), usr("c")]},
    {"name": "assistant_first", "messages": [ast("I start."), usr("ok"), ast("fine")]},
    {"name": "two_users_in_a_row", "messages": [usr("one"), usr("two"), ast("three")]},
    {"name": "system_in_the_middle",
     "messages": [usr("x"), ast("y"), sys_("new rules"), usr("z"), ast("w")]},
    {"name": "system_whitespace", "messages": [sys_("  Be brief.\n"), usr(" hi "), ast(" ok ")]},
    {"name": "no_assistant", "messages": [sys_("s"), usr("only a question")], "reject": True},
    {"name": "blank_content", "messages": [usr("q"), ast(" \n\t ")], "reject": True},
]

# Instruction records: lmtrain renders them as [user: instruction + "\n\n" + input, assistant:
# output] (the input only when present and not blank).
INSTRUCTIONS = [
    {"name": "instruction_no_input", "instruction": "Give three colours.", "input": "",
     "output": "Red, green, blue."},
    {
        "name": "instruction_with_input",
        "instruction": "Summarise the text.",
        "input": "The cat sat on the mat. It was a sunny day.",
        "output": "A cat sat in the sun.",
    },
    {
        "name": "instruction_unicode_edges",
        "instruction": " Übersetze ins Französische:  ",
        "input": "\nGuten Morgen, 世界\n",
        "output": "  Bonjour, le monde. ",
    },
]


def js_trim(s):
    """JavaScript's String.prototype.trim, which the original script used to test the input."""
    ws = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
         "\u2028\u2029\u202f\u205f\u3000\ufeff"
    return s.strip(ws)


def instruction_messages(r):
    user = f"{r['instruction']}\n\n{r['input']}" if js_trim(r["input"]) else r["instruction"]
    return [usr(user), ast(r["output"])]


def render(t, messages):
    try:
        rendered, _ = render_jinja_template(
            conversations=[messages], chat_template=t["template"], bos_token=t["bos_token"],
            eos_token=t["eos_token"], add_generation_prompt=False)
        return {"text": rendered[0]}
    except TemplateError as e:
        return {"error": str(e)}


def write_json(path, obj):
    # As JSON.stringify(obj, null, 1): one-space indent, non-ASCII written as it is.
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main():
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    write_json(OUT_DIR / "cases.json", {"conversations": CASES, "instructions": INSTRUCTIONS})
    for name, t in TEMPLATES.items():
        results = {}
        for c in CASES:
            results[c["name"]] = render(t, c["messages"])
        for r in INSTRUCTIONS:
            results[r["name"]] = render(t, instruction_messages(r))
        out = {"template": name, "source": t["source"], "chat_template": t["template"],
               "bos_token": t["bos_token"], "results": results}
        write_json(OUT_DIR / f"{name}.json", out)
        print(f"{name}: {len(results)} renderings")


if __name__ == "__main__":
    main()
