"""An instrumented copy of ``julia/server.jl`` that writes timestamps, for the breakdowns.

The repository's server is never edited: :func:`instrumented_server` copies it into a temporary
directory and inserts ``__bench_trace(event, id)`` calls at anchors found by exact text. Each
call appends ``event id unix_time`` to the file named by ``$BENCH_JULIA_TRACE``. An anchor that is
missing (the server changed) is reported and its event is simply absent from the breakdown.
The probe kernel (:mod:`bench.probe_kernel`) runs this copy and writes its own Python-side
events as JSON lines; :func:`read_events` merges both into one time-ordered list.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from jutul_jkernel import _resources

_PRELUDE = """
const __BENCH_IO = Ref{Any}(nothing)
function __bench_trace(ev::String, id::Int = 0, t::Float64 = time())
    io = __BENCH_IO[]
    if io === nothing
        p = get(ENV, "BENCH_JULIA_TRACE", "")
        isempty(p) && return nothing
        io = __BENCH_IO[] = open(p, "a")
    end
    println(io, ev, ' ', id, ' ', t)
    flush(io)
    return nothing
end
"""

# (name, regex anchor, replacement): the anchor (multiline regex) must match exactly once; {a}
# stands for the matched text. Regexes, not literal lines, so that small edits to the server
# (argument lists, new frame kinds) do not lose an event.
_EDITS: list[tuple[str, str, str]] = [
    ("script_start", r"\nmodule JKernel\n", "\n__bench_t_script = time(){a}" + _PRELUDE),
    (
        "main_enter",
        r"^function main\(.*\)\n",
        '{a}    __bench_trace("script_start", 0, Main.__bench_t_script)\n'
        '    __bench_trace("main_enter")\n',
    ),
    ("connected", r"^    SOCK\[\] = sock\n", '{a}    __bench_trace("connected")\n'),
    ("redirected", r"^    redirect_output!\(\)\n", '{a}    __bench_trace("redirected")\n'),
    ("rdy_send", r'^    send_frame\("RDY", .*\)\n', '    __bench_trace("rdy_send")\n{a}'),
    (
        "inf_sent",
        r"^    EVAL_TASK\[\] = @async eval_loop\(\)",
        '    __bench_trace("inf_sent")\n{a}',
    ),
    (
        "exe_recv",
        r"^function handle_frame\(kind.*, id.*\)\n",
        '{a}    kind in ("EXE", "EXN") && __bench_trace("exe_recv", id)\n',
    ),
    (
        "eval_start",
        r"^function evaluate\(id::Int.*\)\n",
        '{a}    __bench_trace("eval_start", id)\n',
    ),
    (
        "run_cell_done",
        r"^    status, text, rich, report = run_cell\(Main.*\)\n",
        '{a}    __bench_trace("run_cell_done", id)\n',
    ),
    (
        "drained",
        r"^        drain_output\(\)\n        set_buffering!\(false\)\n",
        '{a}        __bench_trace("drained", id)\n',
    ),
    (
        "res_send",
        r'^        send_frame\("RES", .*\)\n',
        '        __bench_trace("res_send", id)\n{a}        __bench_trace("res_sent", id)\n',
    ),
    (
        "warm_up",
        r"quietly\(popfirst!\(steps\)\)",
        '(__bench_trace("warm_begin", length(steps)); {a}; '
        '__bench_trace("warm_end", length(steps)))',
    ),
]


@dataclass
class Instrumented:
    path: Path
    missing: list[str]


def instrumented_server(directory: Path) -> Instrumented:
    """Write the instrumented copy of server.jl into ``directory``."""
    source = _resources.server_script().read_text(encoding="utf-8")
    missing = []
    for name, anchor, replacement in _EDITS:
        found = list(re.finditer(anchor, source, re.MULTILINE))
        if len(found) != 1:
            missing.append(name)
            continue
        m = found[0]
        source = source[: m.start()] + replacement.replace("{a}", m.group(0)) + source[m.end() :]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "server.jl"
    path.write_text(source, encoding="utf-8")
    return Instrumented(path, missing)


@dataclass(frozen=True)
class Event:
    t: float  # unix time
    side: str  # "julia", "kernel" or "client"
    name: str
    id: int = 0
    extra: str = ""


def read_events(julia_trace: Path, kernel_trace: Path) -> list[Event]:
    """Both sides' events, in time order."""
    events: list[Event] = []
    if julia_trace.exists():
        for line in julia_trace.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                events.append(Event(float(parts[2]), "julia", parts[0], int(parts[1])))
    if kernel_trace.exists():
        for line in kernel_trace.read_text().splitlines():
            rec = json.loads(line)
            events.append(
                Event(rec["t"], "kernel", rec["ev"], int(rec.get("id", 0)), rec.get("extra", ""))
            )
    events.sort(key=lambda e: e.t)
    return events
