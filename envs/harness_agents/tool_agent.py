"""tool-agent: a small agent harness of swerve's own, with its own prompt and tool schema.

It exists to show that training does not depend on one harness's format: where mini-swe-agent
offers one `bash` tool and submits by echoing a sentinel, this agent offers two tools, `run`
(a shell command) and `finish` (ends the task), answers each call with a `role=tool` message
that starts `exit <code>`, and keeps its fixed texts short (a tiny model pays for every token of
them in every trajectory). It talks OpenAI chat completions over HTTP like any harness would:

    OPENAI_BASE_URL=... OPENAI_API_KEY=... SWERVE_TASK_FILE=task.md \\
        python3 -I tool_agent.py --max-steps 8 --request-timeout-s 120 --command-timeout-s 20

It works in its current folder (the task's workspace), reads the task statement from the file
SWERVE_TASK_FILE names, and exits when the model calls `finish` (0), after --max-steps model calls
(0), or when a call fails (2: an HTTP error, such as a context window overflow, is the agent's
own end). `env.harness.name=tool-agent` runs it in each sandbox (envs/harnesses.py binds this file).
Standard library only: the sandbox's own python3 (any 3.8+) runs it, so it imports nothing of
swerve; swerve reads its fixed texts (SYSTEM_PROMPT, TOOLS, NO_TOOL_CALL) from here.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

SYSTEM_PROMPT = ("You fix a bug in the Python repository in the current folder. Use the run tool: run the "
                 "failing tests, read the code, fix it with sed -i, run the tests again. Call finish when "
                 "they pass.")
TOOLS = [
    {"type": "function", "function": {
        "name": "run", "description": "Run a bash command in the repository; returns its exit code and output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "finish", "description": "End the task; the repository is graded as it is.",
        "parameters": {"type": "object", "properties": {}}}},
]
# The user message that answers a reply without a tool call.
NO_TOOL_CALL = "Call a tool: run or finish."
# A command's output beyond this many bytes keeps its head and tail (pytest's summary is last).
MAX_OUTPUT_BYTES = 1500
# What the agent names the model (a gateway session serves its policy whatever the name).
MODEL_NAME = "swerve-policy"
# How long a killed command's process group gets to go before its output is read anyway.
KILL_WAIT_S = 5.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=8, help="model calls before it stops")
    parser.add_argument("--request-timeout-s", type=float, default=120.0, help="limit on one model call")
    parser.add_argument("--command-timeout-s", type=float, default=20.0, help="limit on one command")
    args = parser.parse_args(argv)
    missing = [name for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "SWERVE_TASK_FILE") if not os.environ.get(name)]
    if missing:
        print(f"tool_agent: set {', '.join(missing)}", file=sys.stderr)
        return 2
    with open(os.environ["SWERVE_TASK_FILE"], encoding="utf-8") as handle:
        task = handle.read()
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task}]
    for _ in range(args.max_steps):
        try:
            message = ask(messages, args.request_timeout_s)
        except urllib.error.HTTPError as error:
            print(f"tool_agent: the model call failed: HTTP {error.code}: {error.read()[:2000]!r}", file=sys.stderr)
            return 2
        except (urllib.error.URLError, OSError, ValueError) as error:
            print(f"tool_agent: the model call failed: {error}", file=sys.stderr)
            return 2
        calls = message.get("tool_calls") or []
        # Sent back as it came, so the next request extends this one (the gateway's history rule).
        echoed = {"role": "assistant", "content": message.get("content")}
        messages.append({**echoed, "tool_calls": calls} if calls else echoed)
        if not calls:
            messages.append({"role": "user", "content": NO_TOOL_CALL})
            continue
        for call in calls:
            name = call.get("function", {}).get("name")
            if name == "finish":
                print("tool_agent: finished")
                return 0
            result = use_tool(name, call.get("function", {}).get("arguments"), args.command_timeout_s)
            messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": result})
    print(f"tool_agent: stopped after {args.max_steps} model calls")
    return 0


def ask(messages: list, timeout_s: float) -> dict:
    """The assistant message the model replies with."""
    body = json.dumps({"model": MODEL_NAME, "messages": messages, "tools": TOOLS}).encode()
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions", data=body,
                                     method="POST", headers={"Content-Type": "application/json",
                                                             "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    # No proxy: the base URL is the session's own address, never one to route elsewhere.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=timeout_s) as response:
        return json.load(response)["choices"][0]["message"]


def use_tool(name, arguments, command_timeout_s: float) -> str:
    """The tool message's content for a call other than finish."""
    if name != "run":
        return f"error: no tool named {name!r}; the tools are run and finish"
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("command"), str):
        return 'error: run takes {"command": "<a bash command>"}'
    return run(parsed["command"], command_timeout_s)


def run(command: str, timeout_s: float) -> str:
    """`exit <code>` and the command's output (stdout and stderr together; past MAX_OUTPUT_BYTES,
    its head and tail)."""
    # Output goes to a file, not a pipe: a background process the command leaves cannot hold the
    # read open, and a flood costs disk within the sandbox's limits, not this process's memory.
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(["bash", "-c", command], stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            head = f"exit {process.wait(timeout=timeout_s)}"
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:  # the group ended between the timeout and the kill
                pass
            process.wait(timeout=KILL_WAIT_S)
            head = f"exit 124 (timed out after {timeout_s:g} s)"
        size = out.seek(0, os.SEEK_END)
        out.seek(0)
        if size <= MAX_OUTPUT_BYTES:
            text = out.read().decode("utf-8", "replace")
        else:
            half = MAX_OUTPUT_BYTES // 2
            first = out.read(half).decode("utf-8", "replace")
            out.seek(size - half)
            text = f"{first}\n[... {size - 2 * half} bytes cut ...]\n{out.read().decode('utf-8', 'replace')}"
    return f"{head}\n{text}"

if __name__ == "__main__":
    sys.exit(main())
