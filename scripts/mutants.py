"""make mutants: deliberate breaks that the tests guarding each promise must catch.

Each mutant below breaks one promise of the docs on purpose: a list of edits (file, pattern,
replacement) applied to a temporary copy of the tree, and the tests that guard that promise.
The runner first runs every guarding test on the unbroken copy (they must pass), then, for each
mutant, applies it to a fresh copy and runs only its guarding tests: a failure is "killed", a
pass "survived". It prints one line per mutant and exits non-zero if any survived, if a
pattern is not found (the code it targets changed: fix the pattern, never drop the mutant), or
if a run errs.

Patterns are regular expressions in which every run of spaces in the text matches any
whitespace, so reformatting does not lose them; each must match exactly once. Add a mutant
whenever a new promise is made, then run `make promise-map` (tests/README.md lists them all).

    python scripts/mutants.py                 # all mutants
    python scripts/mutants.py M3 M9           # some of them
    python scripts/mutants.py --list          # what they are
    python scripts/mutants.py --tree main     # the same mutants against another commit's tree
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# One mutant's guarding tests on this 2-core machine take at most a few minutes; past this the
# run is stuck, which counts as an error, not as killed.
RUN_TIMEOUT = 900
# The baseline runs every guarding test at once (~180: 9 min alone here, and past 15 beside a
# fresh clone's `make test`, where the old single bound stopped a whole run).
BASELINE_TIMEOUT = 3600


@dataclass(frozen=True)
class Edit:
    file: str
    find: str  # text; runs of spaces match any whitespace; (?re) prefix: a raw regex
    replace: str


@dataclass(frozen=True)
class Mutant:
    id: str
    promise: str  # what the README or docs/ promise, which this break violates
    edits: tuple[Edit, ...]
    tests: tuple[str, ...]  # "tests/file.py::test_name" (a name prefix: parametrized ids too)
    env: dict[str, str] = field(default_factory=dict)


SUP = "jutul_jkernel/supervisor.py"
STARTUP = "jutul_jkernel/startup.py"
ROUTING = "jutul_jkernel/routing.py"
EXEC = "jutul_jkernel/execution.py"
ESC = "jutul_jkernel/escalation.py"
PROC = "jutul_jkernel/julia_process.py"
ERRS = "jutul_jkernel/errors.py"
KER = "jutul_jkernel/kernel.py"
ROUTER = "jutul_jkernel/comms.py"
IOPUB = "jutul_jkernel/iopub.py"
LOOPS = "jutul_jkernel/loops.py"
# The Julia side: the launcher and the JKernel package's files (julia/JKernel/src/).
LAUNCHER = "julia/server.jl"
LAUNCHER_REST = "julia/launcher.jl"
JK_MAIN = "julia/JKernel/src/main.jl"
JK_WIRE = "julia/JKernel/src/wire.jl"
JK_HELPERS = "julia/JKernel/src/helpers.jl"
JK_EVAL = "julia/JKernel/src/eval.jl"
PC = "tests/test_precompile.py"
SJ = "tests/test_supervisor_julia.py"
KC = "tests/test_kernel_client.py"
IN = "tests/test_interrupts.py"
RP = "tests/test_repl_parity.py"
MAIN = "jutul_jkernel/__main__.py"
EL = "tests/test_early_launch.py"
CAP = "jutul_jkernel/capture.py"
JK_CAPTURE = "julia/JKernel/src/capture.jl"
CT = "tests/test_contracts.py"
INS = "jutul_jkernel/install.py"
JOPT = "jutul_jkernel/julia_options.py"
KSUP = "jutul_jkernel/kernel_supervisor.py"
TI = "tests/test_install.py"
JK_PROGRESS = "julia/JKernel/src/progress.jl"
JK_STDIN = "julia/JKernel/src/stdin.jl"
SURF = "tests/test_surface.py"
DOCTOR = "jutul_jkernel/doctor.py"
DEPOT = "julia/depot.jl"
DOC = "tests/test_doctor.py"
RDV = "jutul_jkernel/rendezvous.py"
SEC = "tests/test_security.py"
APP = "jutul_jkernel/app.py"
JK_COMPAT = "julia/JKernel/src/compat.jl"
ENV_T = "tests/test_environment.py"
JK_DISPLAY = "julia/JKernel/src/display.jl"
JK_STATE = "julia/JKernel/src/state.jl"
JK_COMMS = "julia/JKernel/src/comms.jl"
COMMS = "tests/test_comms.py"
LAB = "tests/test_jupyterlab.py::test_jupyterlab_in_a_browser"
GOLDEN = "tests/test_notebooks.py::test_golden_notebook_outputs_match"
CHILDREN = "jutul_jkernel/children.py"
CC = "tests/test_cell_children.py"
JK_IJULIA = "julia/JKernel/src/ijulia.jl"
OC = "tests/test_output_context.py"
PR = "tests/test_prompts.py"
IJP = "tests/test_ijulia_packages.py"
FT = "tests/test_faults.py"
JK_LIFELINE = "julia/JKernel/src/lifeline.jl"
DSSH = "tests/test_distributed_ssh.py"
DIST = "tests/test_distributed.py"
JK_DIST = "julia/JKernel/src/distributed.jl"
MCPS = "jutul_jkernel/mcp.py"
MT = "tests/test_mcp.py"
AGENT = "jutul_jkernel/agent.py"
JK_REPL = "julia/JKernel/src/repl.jl"
KENV = "tests/test_kernel_environment.py"

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "M1",
        "if Julia dies, every waiter fails at once (queries too)",
        (
            Edit(
                SUP,
                "j.replies.fail_all(j.death)",
                "pass  # mutant M1",
            ),
        ),
        (f"{SJ}::test_queries_fail_fast_when_julia_dies",),
    ),
    Mutant(
        "M2",
        "a loop without safepoints is forced, state kept",
        (
            Edit(
                ESC,
                r"(?re)^_BURST_COUNT = \d+$",
                "_BURST_COUNT = 0",
            ),
        ),
        (
            f"{SJ}::test_interrupt_of_a_loop_without_safepoints_is_forced",
            f"{KC}::test_forced_interrupt_tells_the_user",
        ),
    ),
    Mutant(
        "M3",
        "yielding cells stop by the socket request, allocating ones by one SIGINT",
        (
            Edit(
                ESC,
                "await j.send(encode(FrameKind.INT, it.execution, request)) handed = await "
                "_acked_before_silence(",
                "handed = False and await _acked_before_silence(",  # mutant M3: no INT frame
            ),
            Edit(
                ESC,
                "j.interrupt() claimed, acks = not handed, it.acks",
                "claimed, acks = not handed, it.acks",
            ),
        ),
        (f"{SJ}::test_interrupt_keeps_state",),
    ),
    Mutant(
        "M4",
        "output is delivered whole, even 1 GiB of it",
        (
            Edit(
                IOPUB,
                "def stream(self, name: str, text: str, parent: Parent | None) -> None:",
                "def stream(self, name: str, text: str, parent: Parent | None) -> None:"
                "\n        if len(text) > 4096:\n            return  # mutant M4",
            ),
        ),
        ("tests/test_load.py::test_one_gigabyte_streams_with_bounded_memory",),
    ),
    Mutant(
        "M5",
        "interrupts keep state; a restart happens only when nothing else stops the cell",
        (
            Edit(
                ESC,
                "async def _escalate(self, it: Interrupt, j: JuliaProcess | None) -> None:",
                "async def _escalate(self, it: Interrupt, j: JuliaProcess | None) -> None:\n  "
                "      if j is not None:  # mutant M5\n            "
                "it.reach(InterruptStep.RESTART)\n            await j.kill()\n            "
                "return",
            ),
        ),
        ("tests/test_load.py::test_interrupt_storm",),
        {"JKERNEL_STORM_INTERRUPTS": "20"},
    ),
    Mutant(
        "M6",
        "threads default to physical cores - 1",
        (
            Edit(
                PROC,
                "return max(1, cores - 1)",
                "return os.cpu_count() or 1  # mutant M6",
            ),
        ),
        (f"{SJ}::test_threads_default_and_explicit",),
    ),
    Mutant(
        "M7",
        "a cell that yields is interrupted without any signal",
        (
            Edit(
                ESC,
                "it.acks >= acks + 2 or await _taken(it, ack, _UNWIND_WAIT) or await "
                "_taken_while_compiling(j, it, ack, faults)",
                "False  # mutant M7: a SIGINT even after the cell took the frame",
            ),
        ),
        (f"{SJ}::test_interrupt_keeps_state", f"{SJ}::test_first_interrupt_in_a_fresh_session"),
    ),
    Mutant(
        "M8",
        "output streams live while the cell runs",
        (
            Edit(
                "jutul_jkernel/streams.py",
                "if self._size >= FLUSH_BYTES: self.flush() elif self._timer is None: "
                "self._timer = self._loop.call_later(FLUSH_DELAY, self.flush)",
                "pass  # mutant M8",
            ),
        ),
        (f"{KC}::test_output_is_live",),
    ),
    Mutant(
        "M9",
        "a SIGINT that lands in a finished task reaches the cell (the interrupt sink)",
        (
            Edit(
                JK_MAIN,
                "install_interrupt_sink!() @async flusher_loop()",
                "@async flusher_loop()  # mutant M9: no interrupt sink",
            ),
        ),
        (
            f"{SJ}::test_sigint_alone_stops_each_case",
            f"{SJ}::test_a_sigint_landing_in_a_finished_task_reaches_the_cell",
        ),
    ),
    Mutant(
        "M10",
        "a SIGINT that lands in a server task is forwarded to the cell (guarded)",
        (
            Edit(
                JK_HELPERS,
                "if e isa InterruptException forward_interrupt() else",
                "if e isa InterruptException\n                nothing  # mutant M10\n"
                "            else",
            ),
        ),
        (
            f"{SJ}::test_sigint_alone_stops_each_case",
            f"{SJ}::test_a_sigint_landing_in_a_server_task_reaches_the_cell",
        ),
    ),
    Mutant(
        "M11",
        "every request gets exactly one reply",
        (
            Edit(
                KER,
                'if result.status != "ok": err = result.error',
                'if result.status != "ok":\n'
                "            self._sess.send(  # mutant M11: a second reply\n"
                '                self.shell_stream, "execute_reply",\n'
                '                {"status": "error", "execution_count": count, "ename": "E",'
                ' "evalue": "", "traceback": []},\n'
                "                parent, ident=ident,\n"
                "            )\n"
                "            err = result.error",
            ),
        ),
        ("tests/test_load.py::test_interrupt_storm",),
        {"JKERNEL_STORM_INTERRUPTS": "20"},
    ),
    Mutant(
        "M12",
        "JKernel accepts exactly the kinds protocol.py sends (change both or neither)",
        (Edit(JK_WIRE, "const INCOMING = Dict(", 'const INCOMING = Dict("RUN" => 1, '),),
        (f"{SJ}::test_frame_kinds_match_the_server",),
    ),
    Mutant(
        "M13",
        "the frame decoder rejects a malformed frame (here: an unknown output stream)",
        (
            Edit(
                "jutul_jkernel/protocol.py",
                "FrameKind.OUT: (OUTPUT_STREAMS,),",
                "FrameKind.OUT: (),  # mutant M13",
            ),
        ),
        ("tests/test_fuzz.py::test_decoder_random_bytes_give_frames_or_protocol_error",),
    ),
    Mutant(
        "M14",
        "JKernel rejects a frame kind it does not know",
        (
            Edit(
                JK_WIRE,
                'arity < 0 && protocol_failure("unknown frame kind in header $(repr(header))")',
                "arity < 0 && return pos - 1  # mutant M14",
            ),
        ),
        ("tests/test_fuzz.py::test_server_answers_odd_frames_and_exits_86_on_malformed_ones",),
    ),
    Mutant(
        "M15",
        "a restart says that state was lost",
        (Edit(SUP, "state_kept=False,", "state_kept=True,  # mutant M15"),),
        (f"{SJ}::test_interrupt_that_nothing_stops_restarts_julia",),
    ),
    Mutant(
        "M16",
        "a crash names the signal that ended Julia",
        (
            Edit(
                ERRS,
                'return f"was killed by {name}" + (f" ({note})" if note else "")',
                'return "died"  # mutant M16',
            ),
        ),
        (f"{SJ}::test_killed_process_is_explained",),
    ),
    Mutant(
        "M17",
        "Julia does not outlive a killed supervisor",
        (
            Edit(
                JK_MAIN,
                "watch_parent!() SOCK[] = connect_supervisor(",
                "SOCK[] = connect_supervisor(",
            ),
        ),
        (f"{SJ}::test_julia_does_not_outlive_a_killed_supervisor",),
    ),
    Mutant(
        "M18",
        "the handshake token is not visible to Julia code",
        (Edit(JK_MAIN, 'delete!(ENV, "JUTUL_JKERNEL_TOKEN")', "nothing  # mutant M18"),),
        (f"{SJ}::test_token_is_not_visible_to_julia_code_or_argv",),
    ),
    Mutant(
        "M19",
        "a bad JUTUL_JKERNEL_STARTUP_TIMEOUT is an error the user sees in the cell",
        (
            Edit(
                SUP,
                "self._setting_error: str | None = None",
                "self._setting_error: str | None = None\n"
                "        settings.startup_timeout(1.0)  # mutant M19: raises, killing the kernel",
            ),
        ),
        ("tests/test_faults.py::test_bad_timeout_setting_is_an_error_the_user_sees",),
    ),
    Mutant(
        "M20",
        "display from a task that outlives its cell reaches the last cell, as println does",
        (
            Edit(
                ROUTING,
                "self.stray.show(display_of(frame))",
                "pass  # mutant M20",
            ),
        ),
        (f"{KC}::test_background_task_output_and_display_reach_the_last_cell",),
    ),
    Mutant(
        "M21",
        "JKernel reads each kind with the arity protocol.py writes",
        (Edit(JK_WIRE, "FrameKind.QRY => 3", "FrameKind.QRY => 4"),),
        (f"{SJ}::test_frame_kinds_match_the_server",),
    ),
    Mutant(
        "M22",
        "a cell printing flat out stops by the socket request, output in flight cut short",
        (
            Edit(
                ESC,
                "if not self.discarding: return data",
                "if True:  # mutant M22\n            return data",
            ),
        ),
        (f"{IN}::test_print_flood_stops_by_frame_and_keeps_state",),
    ),
    Mutant(
        "M23",
        "a cell interrupted before it was sent never runs",
        (Edit(SUP, "if self._interrupt_pending: # Interrupted", "if False: # Interrupted"),),
        (f"{IN}::test_an_interrupt_while_the_cell_starts_is_not_lost",),
    ),
    Mutant(
        "M24",
        "loops in cells update globals (soft scope), as in the REPL and IJulia",
        (Edit(JK_EVAL, "default_ast_transforms(SOFTSCOPE[])", "default_ast_transforms(false)"),),
        (f"{RP}::test_a_loop_updates_a_global_as_in_the_repl",),
    ),
    # M25 (display from another thread without the hop to thread 1) is gone: since the
    # supervisor reads Julia's pipes, drain_output no longer waits on a Condition the pumps
    # notify, and a display from thread 2 worked without the hop (the test passed with the
    # break in place). The hop stays, for the pump path and the server's shared state.
    Mutant(
        "M26",
        "jupyter console gets an is_complete answer within its 1 s",
        (Edit(KER, "_IS_COMPLETE_WAIT = 0.8", "_IS_COMPLETE_WAIT = 30.0"),),
        (f"{RP}::test_is_complete_answers_unknown_while_julia_is_busy",),
    ),
    Mutant(
        "M27",
        "Ctrl-C in jupyter console shows the InterruptException before the next prompt",
        (
            Edit(
                KER,
                "settled = asyncio.ensure_future(self._main_loop.idle(_INTERRUPT_SETTLE_WAIT))",
                "settled = asyncio.ensure_future(asyncio.sleep(0, True))  # mutant M27",
            ),
        ),
        (f"{IN}::test_console_sees_the_interrupted_cells_error_before_idle",),
    ),
    Mutant(
        "M171",
        "an interrupted cell's error comes before the interrupt's idle however late it is",
        (Edit(KER, "_INTERRUPT_SETTLE_WAIT = settle_wait()", "_INTERRUPT_SETTLE_WAIT = 10.0"),),
        (f"{IN}::test_an_interrupted_cells_error_comes_before_idle_however_late",),
    ),
    Mutant(
        "M172",
        "a control request is not held behind an interrupt's wait for its cell",
        (
            Edit(
                LOOPS,
                "while self._received <= self._started:",
                "while True:  # mutant M172",
            ),
        ),
        (f"{IN}::test_a_control_request_is_not_held_behind_an_interrupted_cell",),
    ),
    Mutant(
        "M28",
        "a cancelled execute() interrupts its cell instead of leaving Julia running it",
        (Edit(SUP, "result = await asyncio.shield(ex.future)", "result = await ex.future"),),
        (f"{SJ}::test_a_cancelled_execution_is_interrupted",),
    ),
    Mutant(
        "M29",
        "a cancelled execution blocked in C is stopped by the whole escalation, not a frame",
        (
            Edit(
                SUP,
                "self._settling = asyncio.create_task(self._settle(ex))",
                "await self._send(j, encode(FrameKind.INT, ex.id, self._new_id()))",
            ),
        ),
        (f"{SJ}::test_a_cancelled_execution_is_interrupted",),
    ),
    Mutant(
        "M30",
        "an interrupt never forces a throw into Julia's compiler: it waits while Julia compiles",
        (
            Edit(
                ESC,
                "taken = await _taken_while_compiling(j, it, ack, faults)",
                "taken = False  # mutant M30",
            ),
        ),
        (f"{SJ}::test_interrupt_while_julia_compiles_keeps_the_session",),
    ),
    Mutant(
        "M31",
        "a fresh compile cache is what the kernel loads",
        (
            Edit(LAUNCHER, "Base.require(pkg) Base.root_module(pkg)", "nothing  # mutant M31"),
            Edit(
                LAUNCHER_REST,
                'problem = opted_out ? "JUTUL_JKERNEL_PRECOMPILED=no" : cache_problem()',
                'problem = "mutant M31"',
            ),
        ),
        (f"{PC}::test_a_fresh_cache_is_loaded",),
    ),
    Mutant(
        "M32",
        "a cache older than a source file is not loaded (Julia's staleness check decides)",
        (
            Edit(
                LAUNCHER,
                "any(f -> Base.stale_cachefile(entry, f) !== true, "
                "Base.find_all_in_cache_path(pkg))",
                "true  # mutant M32",
            ),
            Edit(LAUNCHER_REST, 'fresh && return ""', 'return ""  # mutant M32'),
        ),
        (f"{PC}::test_a_changed_source_loads_from_source_and_recompiles",),
    ),
    Mutant(
        "M33",
        "a stale cache is compiled again by itself, for the next start",
        (
            Edit(
                LAUNCHER_REST,
                "run(pipeline(command; stdin = devnull, stdout = stdout, stderr = stdout);"
                " wait = false)",
                "nothing  # mutant M33",
            ),
        ),
        (f"{PC}::test_a_changed_source_loads_from_source_and_recompiles",),
    ),
    Mutant(
        "M34",
        "the user's LOAD_PATH and DEPOT_PATH do not show the kernel's package or cache",
        (Edit(LAUNCHER, "append!(empty!(LOAD_PATH), load_path)", "nothing  # mutant M34"),),
        (f"{PC}::test_the_package_is_invisible_to_the_user",),
    ),
    Mutant(
        "M35",
        "an unwritable cache directory means source, said once, and no compile attempt",
        (Edit(LAUNCHER_REST, "elseif !writable(depot)", "elseif false  # mutant M35"),),
        (f"{PC}::test_an_unwritable_cache_directory_loads_from_source",),
    ),
    Mutant(
        "M36",
        "installing the kernel compiles its Julia side",
        (
            Edit(
                "jutul_jkernel/install.py", "if not args.no_precompile:", "if False:  # mutant M36"
            ),
        ),
        ("tests/test_install.py::test_install_compiles_the_julia_side",),
    ),
    Mutant(
        "M41",
        "the launcher leaves Main's names to the user (a cell may assign `last`)",
        (Edit(LAUNCHER, "Core.eval(Module(:JKernelLauncher), quote", "Core.eval(Main, quote"),),
        (f"{PC}::test_the_launcher_leaves_mains_names_to_the_user",),
    ),
    Mutant(
        "M37",
        "the kernel launches Julia before it imports ipykernel (start-up overlaps)",
        (Edit(MAIN, "supervisor.launch()", "pass  # mutant M37"),),
        (f"{EL}::test_kernel_launches_julia_before_it_imports_ipykernel",),
    ),
    Mutant(
        "M38",
        "start() adopts the Julia that launch() spawned instead of starting a second one",
        (
            Edit(
                STARTUP,
                "launched, self.launched = self.launched, None",
                "launched, self.launched = None, self.launched  # mutant M38",
            ),
        ),
        (
            f"{EL}::test_start_adopts_the_launched_julia",
            f"{EL}::test_kernel_through_jupyter_client_runs_one_julia",
        ),
    ),
    Mutant(
        "M39",
        "a launched Julia never outlives the supervisor, started or not",
        (
            Edit(
                STARTUP,
                "if self.launched is not None: # launched but never started: nothing to ask,"
                " kill it self.launched.discard()",
                "if self.launched is not None:  # mutant M39",
            ),
        ),
        (f"{EL}::test_an_end_before_start_leaves_no_julia_and_no_socket[shutdown]",),
    ),
    Mutant(
        "M40",
        "a launch made with other settings is replaced, not adopted",
        (Edit(STARTUP, "launched.settings != launch_settings or ", ""),),
        (f"{EL}::test_launch_with_other_settings_since_is_replaced",),
    ),
    Mutant(
        "M42",
        "the supervisor reads Julia's fd 1 and 2 itself: no writer waits on Julia's own thread",
        (
            Edit(
                PROC,
                "env[settings.STDOUT_FD] = str(out_write)",
                "pass  # mutant M42",
            ),
        ),
        (
            f"{SJ}::test_c_output_larger_than_a_pipe_arrives_whole",
            f"{IN}::test_print_flood_stops_by_frame_and_keeps_state",
        ),
    ),
    Mutant(
        "M43",
        "a frame after an output marker waits until the output before the marker was read",
        (Edit(ROUTING, "await j.pipes.passed(n, _MARK_WAIT)", "True"),),
        (f"{SJ}::test_output_keeps_its_place_around_displays",),
    ),
    Mutant(
        "M44",
        "output written after a marker waits until the frame the marker orders was handled",
        (Edit(CAP, "if s.held or piece[0] > self._released:", "if s.held:"),),
        (f"{SJ}::test_output_keeps_its_place_around_displays", "tests/test_capture.py"),
    ),
    Mutant(
        "M46",
        "Julia's prints to stdout and stderr keep their order (stderr rides in the stdout pipe)",
        (
            Edit(
                JK_CAPTURE,
                "tagged(s::StdioContext) = SUPERVISOR_READS[] && s.io === STDERR_PIPE[]",
                "tagged(s::StdioContext) = false",
            ),
        ),
        (f"{SJ}::test_stdout_and_stderr_keep_their_order",),
    ),
    Mutant(
        "M90",
        "an interrupt reaches the user's post-error hooks (stop pressed again during one)",
        (
            Edit(
                JK_EVAL,
                "IN_USER[] = true\n            try\n                for hook in copy(POSTERROR_HOOKS)",
                "try\n                for hook in copy(POSTERROR_HOOKS)",
            ),
        ),
        (f"{SJ}::test_a_second_stop_during_a_slow_post_error_hook_ends_the_cell",),
    ),
    Mutant(
        "M48",
        "stdout and stderr are Base types, so Base's loading world can print to them and pass "
        "them to a compiling child (Julia 1.10+, audit N10)",
        (
            Edit(
                JK_CAPTURE,
                "const StdioContext = IOContext{Base.LibuvStream}",
                "struct StdioContext <: Base.AbstractPipe; io::Base.LibuvStream; "
                "dict::Base.ImmutableDict{Symbol,Any}; end; "
                "Base.pipe_writer(s::StdioContext) = s.io; "
                "Base.get(s::StdioContext, k, d) = get(s.dict, k, d)",
            ),
        ),
        (
            f"{CT}::test_using_a_package_that_compiles",
            f"{CT}::test_stdio_types_are_base_types",
        ),
    ),
    Mutant(
        "M49",
        "printing works on Julia 1.7+, whose AbstractPipe reserves the fields in, out and err "
        "(audit N1)",
        (
            Edit(
                JK_CAPTURE,
                "const StdioContext = IOContext{Base.LibuvStream}",
                "struct StdioContext <: Base.AbstractPipe; io::Base.LibuvStream; "
                "dict::Base.ImmutableDict{Symbol,Any}; err::Bool; end; "
                "StdioContext(io, d) = StdioContext(io, d, false); "
                "Base.pipe_writer(s::StdioContext) = s.io; "
                "Base.get(s::StdioContext, k, d) = get(s.dict, k, d); "
                "Base.displaysize(s::StdioContext) = displaysize(s.io)",
            ),
            # ... and read as ours, as `tagged` read KernelStdio's `err::Bool`
            Edit(
                JK_CAPTURE,
                "tagged(s::StdioContext) = SUPERVISOR_READS[] && s.io === STDERR_PIPE[]",
                "tagged(s::StdioContext) = !s.err && SUPERVISOR_READS[] && s.io === STDERR_PIPE[]",
            ),
        ),
        (f"{CT}::test_printing_and_logging_work",),
    ),
    Mutant(
        "M45",
        "Julia's output pipes are blocking: C waits for the reader instead of losing its output",
        (
            Edit(
                JK_CAPTURE,
                "ccall(:uv_stream_set_blocking, Cint, (Ptr{Cvoid}, Cint), w.handle, 1)",
                "0",
            ),
        ),
        (f"{SJ}::test_c_output_larger_than_a_pipe_arrives_whole",),
    ),
    Mutant(
        "M47",
        "an interrupt landing while the cell handles another still ends the cell with a result",
        (Edit(JK_EVAL, "is_interrupt(e) || rethrow()\n        INTERRUPTED", "rethrow()"),),
        (f"{SJ}::test_an_interrupt_landing_while_the_first_is_handled_still_ends_the_cell",),
    ),
    Mutant(
        "M80",
        "--julia naming juliaup's launcher is written as given, never resolved",
        (
            Edit(
                INS,
                "return _JuliaChoice(os.path.abspath(os.path.expanduser(julia)),",
                "return _JuliaChoice(os.path.realpath(os.path.expanduser(julia)),",
            ),
        ),
        (f"{TI}::test_julia_given_the_launcher_is_written_as_given",),
    ),
    Mutant(
        "M81",
        "install --channel 1.10 writes `julia +1.10`",
        (
            Edit(
                JOPT,
                "extra.append(juliaup.channel_argument(channel))",
                "pass  # mutant M81",
            ),
        ),
        (f"{TI}::test_channel_writes_the_launcher_and_the_channel_first",),
    ),
    Mutant(
        "M82",
        "the +channel reaches Julia's command line first, where juliaup's launcher looks for it",
        (
            Edit(
                PROC,
                'julia, ["--startup-file=no", *julia_args],',
                'julia, ["--startup-file=no"], *julia_args,  # mutant M82',
            ),
        ),
        (f"{TI}::test_kernel_from_a_channel_spec_runs_the_channel",),
    ),
    Mutant(
        "M83",
        "install --channel pins the launcher found on PATH as found, never resolved",
        (
            Edit(
                INS,
                'return _JuliaChoice(shutil.which("julia") or "julia", "PATH", pinned=pinned)',
                'return _JuliaChoice(os.path.realpath(shutil.which("julia") or "julia"), "PATH",'
                " pinned=pinned)  # mutant M83",
            ),
        ),
        (f"{TI}::test_channel_writes_the_launcher_and_the_channel_first",),
    ),
    Mutant(
        "M84",
        "the kernel banner names the Julia binary that ran (Julia reports it)",
        (Edit(JK_MAIN, "return joinpath(Sys.BINDIR, exename)", 'return "julia"  # mutant M84'),),
        (f"{TI}::test_kernel_from_a_channel_spec_runs_the_channel",),
    ),
    Mutant(
        "M85",
        "the kernel banner names the Julia binary that ran (the kernel shows it)",
        (Edit(KER, 'where = f" ({path})" if path else ""', 'where = ""  # mutant M85'),),
        (f"{TI}::test_kernel_from_a_channel_spec_runs_the_channel",),
    ),
    Mutant(
        "M86",
        "the installer checks that the channel resolves, and says which channel and what to do",
        (
            Edit(
                INS,
                "if not args.no_check and args.channel is not None:",
                "if False:  # mutant M86",
            ),
        ),
        (f"{TI}::test_unknown_channel_fails_naming_it",),
    ),
    Mutant(
        "M87",
        "a --julia inside juliaup's versioned folders is installed with a warning to use --channel",
        (Edit(INS, "_warn_if_juliaup_will_move_it(julia, version)", "pass  # mutant M87"),),
        (f"{TI}::test_julia_inside_juliaup_warns_that_an_update_removes_it",),
    ),
    Mutant(
        "M60",
        "the Julia side uses no outside name that julia/JKernel/surface.toml does not list",
        (
            Edit(
                JK_PROGRESS,
                "const PROGRESS_WIDTH = 30",
                # a method body: defined, never run, so the package still compiles
                "const PROGRESS_WIDTH = 30\nmutant_m60() = Base.uv_eventloop()",
            ),
        ),
        (f"{SURF}::test_every_outside_name_the_julia_side_uses_is_listed",),
    ),
    Mutant(
        "M61",
        "no IO subtype of ours has a field Base reserves on pipes (in/out/err, audit N1)",
        (
            Edit(
                JK_STDIN,
                "mutable struct KernelStdin <: IO\n    buf::IOBuffer",
                "mutable struct KernelStdin <: IO\n    err::IOBuffer",
            ),
        ),
        (f"{SURF}::test_no_io_subtype_of_ours_has_a_field_base_reserves",),
    ),
    Mutant(
        "M70",
        "the doctor passes on this Julia, and fails a row when a cell's stdout goes nowhere",
        (
            Edit(
                ROUTING,
                "if data: ex.sink.write(name, data)",
                'if data and name != "stdout":  # mutant M70\n                '
                "ex.sink.write(name, data)",
            ),
        ),
        (f"{DOC}::test_every_check_passes_on_this_julia",),
    ),
    Mutant(
        "M71",
        "the installer runs the doctor after compiling and prints its summary line",
        (
            Edit(
                "jutul_jkernel/install.py",
                "_run_doctor(args, julia.command, julia_args)",
                "pass  # mutant M71",
            ),
        ),
        ("tests/test_install.py::test_install_runs_the_doctor_and_prints_one_line",),
    ),
    Mutant(
        "M73",
        "the doctor's bare `julia -e nothing` runs the same juliaup channel as its kernel",
        (Edit(DOCTOR, "flags = [*([channel] if channel else []),", "flags = [  # mutant M73"),),
        ("tests/test_install.py::test_doctor_through_a_channel_names_the_julia_that_ran",),
    ),
    Mutant(
        "M74",
        "the doctor names the Julia binary that ran (the server's report), never the launcher",
        (
            Edit(
                DOCTOR,
                "report.julia_version, report.julia_path = sup.julia_version, sup.julia_path",
                "report.julia_version = sup.julia_version  # mutant M74",
            ),
        ),
        ("tests/test_install.py::test_doctor_through_a_channel_names_the_julia_that_ran",),
    ),
    Mutant(
        "M72",
        "the doctor exits non-zero when any check fails",
        (Edit(DOCTOR, "return 0 if report.ok else 1", "return 0  # mutant M72"),),
        (
            f"{DOC}::test_a_julia_that_cannot_start_fails_every_check",
            f"{DOC}::test_a_failing_check_is_reported_and_the_others_still_run",
        ),
    ),
    Mutant(
        "M91",
        "on POSIX Julia connects through a private Unix socket: the supervisor binds no TCP port "
        "that a starting kernel's connection file may name (jupyter_client#487)",
        (Edit(RDV, 'if _IS_WINDOWS or not hasattr(socket, "AF_UNIX"):', "if True:  # mutant M91"),),
        (
            f"{SEC}::test_julia_connects_through_a_unix_socket_only_the_user_can_reach",
            f"{SEC}::test_a_kernel_binds_no_tcp_port_but_its_connection_files",
        ),
    ),
    Mutant(
        "M92",
        "the kernel binds no TCP port beyond its connection file's five (no IOPub pipe)",
        (Edit(APP, "kernelapp.IOPubThread = _IOPubThreadWithoutPipe", "pass  # mutant M92"),),
        (f"{SEC}::test_a_kernel_binds_no_tcp_port_but_its_connection_files",),
    ),
    Mutant(
        "M93",
        "the test sshd's sessions never run the user's ~/.bashrc",
        (
            Edit(
                "tests/ssh_fixture.py",
                "SetEnv {TAG_VARIABLE}={tag} SHLVL=1",
                "SetEnv {TAG_VARIABLE}={tag}",
            ),
        ),
        ("tests/test_distributed_ssh.py::test_sessions_do_not_run_the_users_bashrc",),
    ),
    Mutant(
        "M94",
        "a launched Julia's socket directory is removed however the kernel ends before start()",
        (Edit(STARTUP, "self.launched.listener.close()  # and its socket's directory", "pass"),),
        (f"{EL}::test_an_end_before_start_leaves_no_julia_and_no_socket",),
    ),
    Mutant(
        "M50",
        "cells are interactive as at the REPL: isinteractive() is true",
        (Edit(JK_COMPAT, "    set_interactive!(true)", "    nothing  # mutant M50"),),
        (f"{RP}::test_cells_are_interactive_as_at_the_repl",),
    ),
    Mutant(
        "M52",
        "a server that cannot start ends Julia with status 1 although cells are interactive",
        (Edit(JK_COMPAT, "        set_interactive!(was)", "        nothing  # mutant M52"),),
        (f"{RP}::test_a_server_that_cannot_start_still_ends_with_status_1",),
    ),
    Mutant(
        "M53",
        "cells get the REPL's default AST transforms (1.12+: the non-owning access warning)",
        (
            Edit(
                JK_COMPAT,
                "copy(REPL.repl_ast_transforms) : Any[REPL.softscope]",
                "Any[REPL.softscope] : Any[REPL.softscope]  # mutant M53",
            ),
        ),
        (f"{CT}::test_cells_get_the_repls_default_ast_transforms",),
    ),
    Mutant(
        "M54",
        "where ^C is a cancellation, each cell opens its ^C episode from a task of its own",
        (Edit(JK_COMPAT, "HAS_CANCEL_SCOPES || return f()", "return f()  # mutant M54"),),
        (f"{CT}::test_each_cell_opens_its_c_episode_from_a_task_of_its_own",),
    ),
    Mutant(
        "M55",
        "an interrupt reaches a cell that runs in a task of its own",
        (
            Edit(
                JK_HELPERS,
                "t = something(CELL_TASK[], EVAL_TASK[])",
                "t = EVAL_TASK[]  # mutant M55",
            ),
        ),
        (f"{CT}::test_each_cell_opens_its_c_episode_from_a_task_of_its_own",),
    ),
    Mutant(
        "M56",
        "a fresh compile cache is loaded with master's isprecompiled (no `sourcepath`)",
        (
            Edit(
                LAUNCHER,
                "Base.isprecompiled(pkg) :",
                "Base.isprecompiled(pkg; sourcepath = entry) :  # mutant M56",
            ),
            Edit(
                LAUNCHER_REST,
                "Base.isprecompiled(pkg) :",
                "Base.isprecompiled(pkg; sourcepath = entry) :  # mutant M56",
            ),
        ),
        (f"{PC}::test_a_fresh_cache_is_loaded_by_masters_isprecompiled",),
    ),
    Mutant(
        "M51",
        "inspect finds nothing for an undocumented name, past 1.11+'s internal-binding warning",
        (
            Edit(
                JK_COMPAT,
                "if md isa Markdown.MD && !isempty(md.content) && first(md.content) isa "
                "Markdown.Admonition",
                "if false  # mutant M51",
            ),
        ),
        (f"{ENV_T}::test_inspect_looks_past_the_internal_binding_warning",),
    ),
    Mutant(
        "M110",
        "every MIME is rendered with :limit => true (a DataFrame shows 25 rows, not all)",
        (Edit(JK_DISPLAY, ":limit => true, :color", ":color"),),
        (
            f"{OC}::test_a_frame_as_the_cells_value_shows_its_short_form",
            f"{OC}::test_every_display_path_shows_the_short_form",
        ),
    ),
    Mutant(
        "M111",
        "every MIME is rendered with :jupyter => true (Luxor shows no viewer, only the image)",
        (Edit(JK_DISPLAY, ":jupyter => true,", ""),),
        (f"{OC}::test_a_drawing_knows_it_is_in_a_notebook",),
    ),
    Mutant(
        "M112",
        "stdout and stderr carry :jupyter_stream, kept by derived contexts and the logger",
        (
            Edit(
                JK_CAPTURE,
                "Base.ImmutableDict{Symbol,Any}(dict, :jupyter_stream, name)",
                "dict)  # mutant M112",
            ),
        ),
        (
            f"{OC}::test_stdout_and_stderr_name_their_stream",
            f"{OC}::test_derived_contexts_and_the_logger_keep_the_stream",
        ),
    ),
    Mutant(
        "M113",
        "Base.getpass asks with password=true: the frontend hides what is typed",
        (
            Edit(
                JK_STDIN,
                'with_suffix ? string(message, ": ") : message, true)',
                'with_suffix ? string(message, ": ") : message, false)  # mutant M113',
            ),
        ),
        (
            f"{PR}::test_getpass_is_answered_through_input_reply",
            f"{PR}::test_libgit2_credential_prompts",
        ),
    ),
    Mutant(
        "M114",
        "values are rendered with the kernel's :color, as IJulia renders them",
        (Edit(JK_DISPLAY, ":color => COLOR[], :jupyter", ":color => false, :jupyter"),),
        (f"{OC}::test_values_are_rendered_with_the_kernels_colour",),
    ),
    Mutant(
        "M115",
        "Base.prompt returns its default for an empty answer",
        (
            Edit(
                JK_STDIN,
                "return isempty(line) ? String(default) : String(line)",
                "return String(line)  # mutant M115",
            ),
        ),
        (
            f"{PR}::test_prompt_takes_its_default_for_an_empty_answer",
            f"{PR}::test_libgit2_credential_prompts",
        ),
    ),
    Mutant(
        "M116",
        "IJulia.readprompt(prompt; password=true) hides what is typed",
        (
            Edit(
                JK_IJULIA,
                'JKernel.ask_line("IJulia.readprompt", prompt, password)',
                'JKernel.ask_line("IJulia.readprompt", prompt, false)  # mutant M116',
            ),
        ),
        (f"{PR}::test_readprompt_and_readline",),
    ),
    Mutant(
        "M117",
        "without allow_stdin, a prompt's error names the call that wanted a line",
        (
            Edit(
                JK_STDIN,
                'error(asker, " needs a line from the frontend, but ", reply.msg)',
                "error(reply.msg)  # mutant M117",
            ),
        ),
        (f"{PR}::test_without_allow_stdin_the_error_names_the_call",),
    ),
    Mutant(
        "M118",
        "display(mime, x) renders in the same context as a cell's value",
        (
            Edit(
                JK_DISPLAY,
                "data = Dict{String,Any}(m => jupyter_string(mime, x))",
                "data = Dict{String,Any}(m => sprint(show, mime, x))  # mutant M118",
            ),
        ),
        (f"{OC}::test_every_display_path_shows_the_short_form",),
    ),
    Mutant(
        "M119",
        "Base.prompt shows its message in the input request, not on stdout",
        (Edit(JK_STDIN, "@static if isdefined(Base, :prompt)", "@static if false  # M119"),),
        (f"{PR}::test_prompt_takes_its_default_for_an_empty_answer",),
    ),
    # ---- packages that know IJulia (issue 28) ----
    Mutant(
        "M100",
        "ProgressMeter before 1.11 redraws: Main.IJulia.stdio_bytes[] = 0 works",
        (
            Edit(
                JK_IJULIA,
                "const stdio_bytes = Ref{Int}(0)",
                "const stdio_bytes_dropped = Ref{Int}(0)  # mutant M100",
            ),
        ),
        (f"{IJP}::test_progressmeter_1_9_resets_stdio_bytes",),
    ),
    Mutant(
        "M101",
        "ProgressMeter 1.11's branch for IJulia >= 1.30: Main.IJulia.reset_stdio_count() works",
        (
            Edit(
                JK_IJULIA,
                "reset_stdio_count() = (stdio_bytes[] = 0)",
                "reset_stdio_count_dropped() = (stdio_bytes[] = 0)  # mutant M101",
            ),
        ),
        (f"{IJP}::test_progressmeter_1_11_on_ijulia_1_30_resets_the_count",),
    ),
    Mutant(
        "M99",
        "a source start survives loading internals that changed: JKernel then loads as a plain "
        "module",
        (
            Edit(
                LAUNCHER_REST,
                'say("loading JKernel as a package failed ("',
                'rethrow()  # mutant M99\n            say("loading JKernel as a package failed ("',
            ),
        ),
        (f"{IJP}::test_a_source_start_survives_loading_internals_that_changed",),
    ),
    Mutant(
        "M102",
        "pkgversion(Main.IJulia) is a VersionNumber when JKernel loads from source",
        (
            Edit(
                LAUNCHER_REST,
                "with_package(include_as_package) jk = Base.root_module(pkg)",
                "Base.include(Main, entry)  # mutant M102\n"
                "        jk = Base.invokelatest(getproperty, Main, :JKernel)",
            ),
        ),
        (f"{IJP}::test_pkgversion_of_ijulia_is_a_version_however_jkernel_loads",),
    ),
    Mutant(
        "M103",
        "Plots' inline(): display(Main.IJulia.InlineDisplay(), plt) shows the plot",
        (
            Edit(
                JK_IJULIA,
                "Base.display(::InlineDisplay, x) = Base.display(JKernel.KernelDisplay(), x)",
                "Base.display(::InlineDisplay, x) = nothing  # mutant M103",
            ),
        ),
        (f"{IJP}::test_plots_inline_displays_through_inline_display",),
    ),
    Mutant(
        "M104",
        "PyPlot's withfig: Main.IJulia.undisplay(f) exists",
        (Edit(JK_IJULIA, "undisplay(x) = x", "undisplay_dropped(x) = x  # mutant M104"),),
        (f"{IJP}::test_pyplot_hooks_show_figures_after_each_cell",),
    ),
    Mutant(
        "M105",
        "IJulia.n is the running cell's number",
        (
            Edit(
                JK_IJULIA,
                "record_cell!(cell::Int) = (global n = cell; nothing)",
                "record_cell!(cell::Int) = nothing  # mutant M105",
            ),
        ),
        (f"{IJP}::test_n_ans_in_and_out_follow_the_cells",),
    ),
    Mutant(
        "M106",
        "IJulia.register_mime adds a MIME type to every bundle (Quarto's application/pdf)",
        (
            Edit(
                JK_DISPLAY,
                "add_shown!(data, REGISTERED_MIMES, x, false)",
                "nothing  # mutant M106",
            ),
        ),
        (f"{IJP}::test_quarto_registers_pdf_figures",),
    ),
    Mutant(
        "M107",
        "a registered application/...+json type reaches Jupyter as JSON, not text",
        (
            Edit(
                IOPUB,
                '_JSON_MIME = re.compile(r"application/(.*\\+)?json")',
                '_JSON_MIME = re.compile(r"application/json")  # mutant M107',
            ),
        ),
        (f"{IJP}::test_registered_json_types_reach_jupyter_as_json",),
    ),
    Mutant(
        "M108",
        "PlotlyLight's `stdout isa Main.IJulia.IJuliaStdio` answers false instead of failing",
        (
            Edit(
                JK_IJULIA,
                "abstract type IJuliaStdio <: IO end",
                "# mutant M108: no IJuliaStdio",
            ),
        ),
        (f"{IJP}::test_ijulia_internals_are_harmless",),
    ),
    Mutant(
        "M109",
        "IJulia.orig_stdout[] and orig_stderr[] reach the kernel's log",
        (
            Edit(
                JK_MAIN,
                "IJulia.orig_stdout[] = IJulia.orig_stderr[] = DIAG[]",
                "nothing  # mutant M109",
            ),
        ),
        (f"{IJP}::test_orig_stdout_is_the_log_not_the_notebook",),
    ),
    Mutant(
        "M120",
        "a cell still running after Julia took its interrupt gets it again (the next rung)",
        (
            Edit(
                ESC,
                "it.acks >= acks + 2",
                "True  # mutant M120",
            ),
        ),
        (f"{CC}::test_a_cell_that_goes_on_after_its_interrupt_gets_it_again",),
    ),
    Mutant(
        "M121",
        "the processes an interrupted cell started are stopped when it ends",
        (
            Edit(
                SUP,
                'if result.status == "interrupted": await ex.stop_children(j)',
                "if False:  # mutant M121\n                    pass",
            ),
        ),
        (
            f"{CC}::test_a_child_that_outlives_an_interrupted_cell_is_stopped",
            f"{CC}::test_a_package_precompile_worker_is_stopped",
        ),
    ),
    Mutant(
        "M122",
        "only the processes started during the interrupted cell are stopped, not earlier ones",
        (
            Edit(
                SUP,
                "ex.children_before = children.descendants(j.proc.pid)",
                "ex.children_before = frozenset()  # mutant M122",
            ),
        ),
        (f"{CC}::test_a_child_of_an_earlier_cell_survives_a_later_interrupt",),
    ),
    Mutant(
        "M123",
        "Distributed's workers (detached, in a group of their own) survive an interrupted cell",
        (Edit(CHILDREN, "os.getpgid(proc.pid) != pid", "False"),),
        (f"{CC}::test_distributed_workers_survive_an_interrupted_cell",),
    ),
    Mutant(
        "M124",
        "the cell's stderr names the processes that were stopped",
        (
            Edit(
                EXEC,
                'self.sink.write("stderr", line.encode())',
                "pass  # mutant M124",
            ),
        ),
        (f"{CC}::test_a_child_that_outlives_an_interrupted_cell_is_stopped",),
    ),
    Mutant(
        "M125",
        "a process that ignores SIGTERM is killed after a bounded wait",
        (Edit(CHILDREN, "proc.kill()", "pass  # mutant M125"),),
        (f"{CC}::test_a_child_that_outlives_an_interrupted_cell_is_stopped",),
    ),
    Mutant(
        "M126",
        "a cell that ends normally leaves what it started running",
        (
            Edit(
                SUP,
                'if result.status == "interrupted": await ex.stop_children(j)',
                "if True:  # mutant M126\n                    await ex.stop_children(j)",
            ),
        ),
        (f"{CC}::test_a_child_of_an_earlier_cell_survives_a_later_interrupt",),
    ),
    Mutant(
        "M127",
        "a cancelled cell's processes are stopped too, before the next execution",
        (
            Edit(
                SUP,
                'and ex.future.result().status == "interrupted"',
                "and False  # mutant M127",
            ),
        ),
        (f"{CC}::test_a_cancelled_cell_leaves_no_child",),
    ),
    Mutant(
        "M140",
        "one interrupt is delivered once: the listener leaves a request the SIGINT claimed",
        (
            Edit(
                JK_WIRE,
                "claim_interrupt(request) && forward_interrupt()",
                "forward_interrupt()  # mutant M140",
            ),
        ),
        (
            f"{SJ}::test_one_interrupt_is_delivered_once_to_code_that_catches_it",
            f"{IN}::test_one_stop_reaches_code_that_catches_it_once",
        ),
    ),
    Mutant(
        "M141",
        "one interrupt is delivered once: no SIGINT for a request the listener claimed",
        (
            Edit(
                ESC,
                "if not handed and not self.claims.claim(request):",
                "if not handed and not self.claims.claim(request) and False:  # mutant M141",
            ),
        ),
        (f"{SJ}::test_a_request_the_listener_claimed_gets_no_sigint",),
    ),
    Mutant(
        "M142",
        "a listener that lost the claim still says the interrupt reached the cell: no burst",
        (
            Edit(
                JK_WIRE,
                "claim_interrupt(request) && forward_interrupt() "
                "send_frame(FrameKind.ACK, string(id))",
                "claim_interrupt(request) && (forward_interrupt(); "
                "send_frame(FrameKind.ACK, string(id)))",
            ),
        ),
        (
            f"{SJ}::test_one_interrupt_is_delivered_once_to_code_that_catches_it",
            f"{SJ}::test_code_that_caught_a_signal_and_goes_on_is_asked_again_not_restarted",
        ),
    ),
    Mutant(
        "M143",
        "one interrupt is delivered once: the supervisor claims a request before its SIGINT",
        (
            Edit(
                ESC,
                "(self.path / str(request)).mkdir()",
                "pass  # mutant M143",
            ),
        ),
        (
            f"{SJ}::test_one_interrupt_is_delivered_once_to_code_that_catches_it",
            f"{SJ}::test_one_interrupt_is_delivered_once_when_frame_and_signal_race",
        ),
    ),
    Mutant(
        "M144",
        "an execution's interrupt claims go when it ends",
        (
            Edit(
                ESC,
                "(self.path / str(request)).rmdir()",
                "pass  # mutant M144",
            ),
        ),
        (f"{SJ}::test_one_interrupt_is_delivered_once_to_code_that_catches_it",),
    ),
    Mutant(
        "M145",
        "the claims directory goes at shutdown, even from the caller's log directory",
        (
            Edit(
                SUP,
                "self._claims.remove() self._starter.remove_log_dir()",
                "self._starter.remove_log_dir()  # mutant M145",
            ),
        ),
        (f"{SJ}::test_the_claims_directory_goes_with_the_supervisor",),
    ),
    Mutant(
        "M146",
        "Julia is told where the claims are",
        (
            Edit(
                PROC,
                "env[settings.CLAIMS] = str(claims)",
                "pass  # mutant M146",
            ),
        ),
        (f"{SJ}::test_one_interrupt_is_delivered_once_to_code_that_catches_it",),
    ),
    Mutant(
        "M147",
        "code that caught a SIGINT and goes on is asked again, as a new request: no restart",
        (
            Edit(
                ESC,
                "if claimed and not it.forced and it.acks < acks + 2:",
                "if False:  # mutant M147",
            ),
        ),
        (f"{SJ}::test_code_that_caught_a_signal_and_goes_on_is_asked_again_not_restarted",),
    ),
    Mutant(
        "M148",
        "the claims directory is named absolutely: Julia finds it from its own cwd",
        (
            Edit(
                ESC,
                'self.path = Path(tempfile.mkdtemp(prefix="claims-", dir=beside)).absolute()',
                'self.path = Path(tempfile.mkdtemp(prefix="claims-", dir=beside))  # mutant M148',
            ),
        ),
        (f"{SJ}::test_the_claims_directory_goes_with_the_supervisor",),
    ),
    Mutant(
        "M130",
        "a compile removes the temporary files that killed compiles left in the depot",
        (Edit(DEPOT, "startswith(name, TEMP_PREFIX) || continue", "continue  # mutant M130"),),
        (f"{PC}::test_a_killed_compile_leaves_no_temporary_file_and_no_lock_in_the_way",),
    ),
    Mutant(
        "M131",
        "a kernel that finds a compile under way loads the source and starts no compile",
        (
            Edit(
                LAUNCHER_REST,
                "elseif (holder = lock_holder(lock_file(depot))) !== nothing",
                "elseif (holder = nothing) !== nothing  # mutant M131",
            ),
        ),
        (f"{PC}::test_a_kernel_leaves_the_compile_to_the_one_under_way",),
    ),
    Mutant(
        "M132",
        "a live compile lock is never taken over: one compile at a time",
        (
            Edit(
                DEPOT,
                "lock_holder(path) === nothing || return nothing",
                "nothing  # mutant M132",
            ),
        ),
        (
            f"{PC}::test_a_compile_for_the_next_start_gives_way_to_one_under_way",
            f"{PC}::test_kernels_that_start_together_compile_once",
            f"{PC}::test_precompile_waits_for_the_compile_under_way",
        ),
    ),
    Mutant(
        "M133",
        "the installer's precompile waits for a compile under way, then does its work",
        (Edit(LAUNCHER_REST, 'waits = !("--no-wait" in ARGS)', "waits = false  # mutant M133"),),
        (f"{PC}::test_precompile_waits_for_the_compile_under_way",),
    ),
    Mutant(
        "M134",
        "a lock whose holder died (a zombie not yet reaped) blocks no compile",
        (Edit(DEPOT, "Sys.islinux() || return true", "return true  # mutant M134"),),
        (f"{PC}::test_a_lock_whose_holder_died_is_taken_over_at_once",),
    ),
    Mutant(
        "M135",
        "a compile removes the default depots of installs that are gone or unused",
        (
            Edit(
                LAUNCHER_REST,
                "default_depot && remove_abandoned_siblings(",
                "false && remove_abandoned_siblings(  # mutant M135\n",
            ),
        ),
        (f"{PC}::test_a_compile_removes_the_depots_of_installs_that_are_gone",),
    ),
    Mutant(
        "M136",
        "a depot whose compile lock is held is never removed",
        (
            Edit(
                DEPOT,
                "lock_holder(lock_file(dir)) === nothing || return nothing",
                "nothing  # mutant M136",
            ),
        ),
        (f"{PC}::test_a_compile_removes_the_depots_of_installs_that_are_gone",),
    ),
    Mutant(
        "M137",
        "the clean-up of depots never follows nor removes a symlink",
        (Edit(DEPOT, "(islink(dir) || !isdir(dir)) && continue", "!isdir(dir) && continue"),),
        (f"{PC}::test_a_compile_removes_the_depots_of_installs_that_are_gone",),
    ),
    Mutant(
        "M138",
        "the directory around $JUTUL_JKERNEL_DEPOT is the user's: no sibling there is removed",
        (
            Edit(
                LAUNCHER_REST,
                'default_depot = isempty(get(ENV, "JUTUL_JKERNEL_DEPOT", ""))',
                "default_depot = true  # mutant M138",
            ),
        ),
        (f"{PC}::test_a_compile_removes_the_depots_of_installs_that_are_gone",),
    ),
    Mutant(
        "M139",
        "a kernel start from the cache records the depot's package and its last use",
        (
            Edit(
                LAUNCHER,
                'write(joinpath(depot, "package-dir"), pkg_dir)',
                "nothing  # mutant M139",
            ),
        ),
        (f"{PC}::test_a_kernel_start_records_its_depot_as_used",),
    ),
    Mutant(
        "M150",
        "SSH workers end when their Julia is SIGKILLed: each cell ties them to a lifeline",
        (
            Edit(
                JK_EVAL,
                "        Base.invokelatest(update_lifelines)",
                "        nothing  # mutant M150",
            ),
        ),
        (f"{DSSH}::test_sigkilled_julia_ends_busy_remote_workers",),
    ),
    Mutant(
        "M151",
        "the lifeline's loop signals its workers when its stdin ends",
        (
            Edit(
                JK_LIFELINE,
                'raw"esac; done; [ -z \\"$p\\" ] && exit 0; kill -15',
                'raw"esac; done; exit 0; kill -15',
            ),
        ),
        (f"{DSSH}::test_sigkilled_julia_ends_busy_remote_workers",),
    ),
    Mutant(
        "M152",
        "a SIGINT to Julia's process group leaves the lifeline's ssh, and so the workers, alive",
        (
            Edit(
                JK_LIFELINE,
                "open(pipeline(detach(cmd); stderr = devnull)",
                "open(pipeline(cmd; stderr = devnull)",
            ),
        ),
        (f"{DSSH}::test_a_signalled_interrupt_keeps_the_workers_and_their_lifeline",),
    ),
    Mutant(
        "M153",
        "a worker that outlasts SIGTERM gets SIGKILL from the lifeline",
        (Edit(JK_LIFELINE, 'kill -9 $p 2>/dev/null")', 'true")  # mutant M153'),),
        (f"{DSSH}::test_sigkilled_julia_ends_busy_remote_workers",),
    ),
    Mutant(
        "M154",
        "local workers end when their Julia is SIGKILLed while they compute: a lifeline holds them",
        (
            Edit(
                JK_LIFELINE,
                "local_lifeline_possible() || continue",
                "continue  # mutant M154",
            ),
        ),
        (f"{DIST}::test_sigkilled_julia_ends_busy_local_workers",),
    ),
    Mutant(
        "M155",
        "a SIGINT to Julia's process group leaves the local lifeline, and so the workers, alive",
        (
            Edit(
                JK_LIFELINE,
                "open(pipeline(detach(cmd); stderr = devnull)",
                "open(pipeline(cmd; stderr = devnull)",
            ),
        ),
        (f"{DIST}::test_a_signalled_interrupt_keeps_the_local_workers_and_their_lifeline",),
    ),
    Mutant(
        "M156",
        "a local worker that outlasts SIGTERM gets SIGKILL from the lifeline",
        (Edit(JK_LIFELINE, 'kill -9 $p 2>/dev/null")', 'true")  # mutant M156'),),
        (f"{DIST}::test_sigkilled_julia_ends_busy_local_workers",),
    ),
    Mutant(
        "M157",
        "a message an interrupt tore is dropped, so the worker's next call is answered",
        (Edit(JK_DIST, "trylock(io.lock) || continue", "continue  # mutant M157"),),
        (f"{DIST}::test_a_call_after_a_send_an_interrupt_tore_is_answered",),
    ),
    Mutant(
        "M160",
        "a Julia that stalls before connecting without writing is said to have written nothing",
        (Edit(STARTUP, "if said: msg +=", "if True:  # mutant M160\n                msg +="),),
        (f"{FT}::test_julia_that_writes_nothing_before_stalling_is_said_to",),
    ),
    Mutant(
        "M161",
        "what a Julia that stalls before connecting wrote is quoted in the error",
        (
            Edit(
                STARTUP,
                r"(?re)said = j\.post_mortem\(\)$",
                'said = j.post_mortem() and ""  # mutant M161',
            ),
        ),
        (f"{FT}::test_julia_stalling_before_the_handshake_times_out",),
    ),
    Mutant(
        "M162",
        "shutdown() ends a Julia that is still starting at once, not when the process exits",
        (
            Edit(
                STARTUP,
                "if starting is not None and starting is not connected:",
                "if False:  # mutant M162",
            ),
        ),
        (f"{SJ}::test_shutdown_during_start_ends_the_starting_julia",),
    ),
    Mutant(
        "M163",
        "a SIGTERMed kernel takes a Julia that is still starting along",
        (
            Edit(
                STARTUP,
                "if starting is not None and starting.proc.returncode is None:",
                "if False:  # M163",
            ),
        ),
        (f"{FT}::test_a_julia_still_starting_ends_with_its_kernel[sigterm]",),
    ),
    Mutant(
        "M173",
        "of Markdown and HTML a value sends only Markdown, as IJulia does",
        (
            Edit(
                JK_STATE,
                'MIME[MIME("text/markdown"), MIME("text/html")]',
                'MIME("text/markdown"), MIME("text/html")',
            ),
        ),
        (GOLDEN,),
    ),
    Mutant(
        "M174",
        "a Plotly figure's JSON reaches the notebook",
        (Edit(JK_STATE, 'MIME("application/vnd.plotly.v1+json"),', "# mutant M174"),),
        (GOLDEN,),
    ),
    Mutant(
        "M175",
        "Vega-Lite v5, which JupyterLab draws, comes first of the Vega-Lite versions",
        (
            Edit(
                JK_STATE,
                'MIME("application/vnd.vegalite.v$n+json") for n in 5:-1:2',
                'MIME("application/vnd.vegalite.v$n+json") for n in 4:-1:2',
            ),
        ),
        (GOLDEN,),
    ),
    Mutant(
        "M176",
        "JKernel.register_mime and register_jsonmime are IJulia's",
        (Edit(JK_DISPLAY, "register_mime(x) = IJulia.register_mime(x)", "register_mime(x) = x"),),
        (f"{IJP}::test_jkernel_registers_mime_types_as_ijulia_does",),
    ),
    Mutant(
        "M177",
        "a comm Julia opens reaches the frontend",
        (
            Edit(
                JK_COMMS,
                'send_frame(FrameKind.CMM, string(id, " ", head_bytes), payload; mark = drain_output())',
                "nothing  # mutant M177",
            ),
        ),
        (f"{COMMS}::test_a_comm_julia_opens_reaches_the_client_and_comm_info_lists_it",),
    ),
    Mutant(
        "M178",
        "comm_info lists the open comms, by target",
        (Edit(ROUTER, "if target is None or name == target", "if False  # mutant M178"),),
        (f"{COMMS}::test_a_comm_julia_opens_reaches_the_client_and_comm_info_lists_it",),
    ),
    Mutant(
        "M179",
        "a frontend's comm reaches the register_comm of its target",
        (
            Edit(
                JK_COMMS,
                'register_comm(comm, msg) elseif msg_type == "comm_msg"',
                'nothing  # mutant M179\n    elseif msg_type == "comm_msg"',
            ),
        ),
        (f"{COMMS}::test_a_client_comm_reaches_its_target_and_round_trips_buffers",),
    ),
    Mutant(
        "M180",
        "binary buffers reach the frontend",
        (Edit(ROUTER, "buffers=list(message.buffers),", "buffers=[],  # mutant M180"),),
        (f"{COMMS}::test_a_client_comm_reaches_its_target_and_round_trips_buffers",),
    ),
    Mutant(
        "M181",
        "what a callback sends has its comm message as parent",
        (
            Edit(
                KER,
                "out.flush() self._comms.publish(sent, parent)",
                "out.flush()\n            self._comms.publish(sent, self._last_parent)  # mutant M181",
            ),
        ),
        (f"{COMMS}::test_a_client_comm_reaches_its_target_and_round_trips_buffers",),
    ),
    Mutant(
        "M182",
        "a frontend's comm_close runs on_close",
        (Edit(JK_COMMS, "comm.on_close(msg)", "nothing  # mutant M182"),),
        (f"{COMMS}::test_close_runs_on_close_and_the_comm_is_gone",),
    ),
    Mutant(
        "M183",
        "a comm to an unknown target is closed",
        (
            Edit(
                JK_COMMS,
                'send_comm_message("comm_close", id, Dict{String,Any}(), Dict{String,Any}(), ())',
                "nothing  # mutant M183",
            ),
        ),
        (f"{COMMS}::test_an_unknown_target_is_closed_by_julia_after_a_cell_that_never_yields",),
    ),
    Mutant(
        "M184",
        "a callback's error is shown on its stderr",
        (
            Edit(
                JK_COMMS,
                'println(stderr, "Error in the ", d.msg_type, " callback of comm ",',
                'println(devnull, "Error in the ", d.msg_type, " callback of comm ",',
            ),
        ),
        (f"{COMMS}::test_a_callback_that_throws_shows_its_error_and_the_comm_lives_on",),
    ),
    Mutant(
        "M185",
        "an interrupt stops a callback and says so",
        (
            Edit(
                JK_COMMS,
                "is_interrupt(e) && (acknowledge_interrupt(); return INTERRUPTED)",
                'is_interrupt(e) && return CellOutcome("ok", "", nothing, nothing)',
            ),
        ),
        (f"{COMMS}::test_an_interrupt_stops_a_callback_and_keeps_the_state",),
    ),
    Mutant(
        "M186",
        "Julia ending (a death, a restart) closes every comm",
        (Edit(ROUTER, "for comm_id in list(self._open):", "for comm_id in []:  # mutant M186"),),
        (
            f"{COMMS}::test_julia_dying_closes_every_comm",
            f"{COMMS}::test_a_restart_closes_every_comm",
        ),
    ),
    Mutant(
        "M187",
        "a widget's view travels as JSON: the slider is drawn and moves Julia's value",
        (
            Edit(
                JK_STATE,
                'MIME("application/vnd.jupyter.widget-view+json"),',
                "# mutant M187",
            ),
        ),
        (f"{COMMS}::test_a_widget_view_arrives_in_the_bundle_as_a_json_object", LAB),
    ),
    Mutant(
        "M188",
        "a comm_open to an unknown target is closed at once, even while a cell runs",
        (
            Edit(
                ROUTER,
                'if not await self._target_may_be_known(content.get("target_name")):',
                "if False:  # mutant M188",
            ),
        ),
        ("tests/test_kernel_environment.py::test_comm_open_is_answered_while_a_cell_runs",),
    ),
    Mutant(
        "M189",
        "a comm message that comes while a cell runs leaves the next cell its own idle",
        (Edit(ROUTER, "if beside_another:", "if False:  # mutant M189"),),
        (f"{COMMS}::test_the_cell_after_a_comm_queued_behind_a_cell_gets_its_own_idle",),
    ),
    Mutant(
        "M190",
        "comm messages received before a cell run before it",
        (
            Edit(
                KER,
                "await self._comms.delivered()  # those received before the cell run before it",
                "pass  # mutant M190",
            ),
        ),
        (f"{COMMS}::test_a_comm_open_queued_behind_a_callback_is_handled_before_the_next_cell",),
    ),
    Mutant(
        "M170",
        "a plain kernel start does not import the Xvfb module",
        (Edit(KSUP, "from . import settings", "from . import settings, xvfb  # mutant M170"),),
        (
            "tests/test_settings.py::"
            "test_the_xvfb_module_is_imported_only_for_a_kernel_with_a_private_display",
        ),
    ),
    Mutant(
        "M191",
        "a cancelled execution whose interrupt ended in a restart: the next one says so",
        (Edit(SUP, "self._lost_state = ex.future.result().notice", "pass  # mutant M191"),),
        (f"{SJ}::test_a_cancelled_execution_that_ends_in_a_restart_tells_the_next_one",),
    ),
    Mutant(
        "M200",
        "MCP: stdout and stderr come without terminal escapes",
        (Edit(MCPS, 'return _ANSI.sub("", text)', "return text  # mutant M200"),),
        (f"{MT}::test_outputs_in_order_without_ansi",),
    ),
    Mutant(
        "M201",
        "MCP: long output is kept as head and tail, with a note of what was cut",
        (Edit(MCPS, "_OUTPUT_HEAD_CHARS = 20_000", "_OUTPUT_HEAD_CHARS = 2_000_000  # M201"),),
        (f"{MT}::test_a_megabyte_of_output_keeps_head_and_tail",),
    ),
    Mutant(
        "M202",
        "MCP: a timeout interrupts the call and keeps the state, never restarts for being slow",
        (
            Edit(
                MCPS,
                "await s.supervisor.interrupt() extra = await _ended(task) "
                "extra = _after_timeout(extra, limit)",
                "await s.supervisor.restart()  # mutant M202\n"
                "                extra = await _ended(task)\n"
                "                extra = _after_timeout(extra, limit)",
            ),
        ),
        (
            f"{MT}::test_timeout_on_sleep_interrupts_and_keeps_state",
            f"{MT}::test_timeout_on_a_printing_loop_keeps_output_and_state",
        ),
    ),
    Mutant(
        "M203",
        "MCP: a timed-out call answers with what it printed so far",
        (
            Edit(
                MCPS,
                "extra = _after_timeout(extra, limit)",
                "extra = _after_timeout(extra, limit)\n"
                "                transcript.outputs.clear()  # mutant M203",
            ),
        ),
        (f"{MT}::test_timeout_on_sleep_interrupts_and_keeps_state",),
    ),
    Mutant(
        "M204",
        "MCP: a call whose interrupt ended in a restart says plainly that the state was lost",
        (Edit(MCPS, "if result.state_kept", "if True  # mutant M204\n            "),),
        (
            f"{MT}::test_timeout_that_nothing_stops_says_the_state_was_lost",
            f"{MT}::test_cancelled_call_that_nothing_stops_tells_the_next_call_the_state_was_lost",
        ),
    ),
    Mutant(
        "M205",
        "MCP: a call the client cancelled is interrupted, and the next call says how it ended",
        (Edit(MCPS, 'before.append(Output("notice", said))', "pass  # mutant M205"),),
        (
            f"{MT}::test_cancelled_call_is_interrupted_and_the_next_call_says_so",
            f"{MT}::test_cancelled_call_that_nothing_stops_tells_the_next_call_the_state_was_lost",
        ),
    ),
    Mutant(
        "M206",
        "MCP: PNG displays and values come back as image content",
        (Edit(MCPS, "image = await _image(o.data) if o.data else None", "image = None  # M206"),),
        (f"{MT}::test_png_display_and_value_are_image_content",),
    ),
    Mutant(
        "M207",
        "MCP: each session has its own Julia and state",
        (
            Edit(
                MCPS,
                "s = self.sessions.get(name) if s is not None:",
                "s = next(iter(self.sessions.values()), None)  # mutant M207\n"
                "        if s is not None:",
            ),
        ),
        (f"{MT}::test_two_sessions_run_at_once_with_their_own_state",),
    ),
    Mutant(
        "M208",
        "MCP: different sessions run in parallel",
        (
            Edit(
                MCPS,
                "async with s.queue:",
                "async with next(iter(sessions.sessions.values())).queue:  # mutant M208",
            ),
        ),
        (f"{MT}::test_two_sessions_run_at_once_with_their_own_state",),
    ),
    Mutant(
        "M209",
        "MCP: long calls send progress notifications with their latest lines",
        (Edit(MCPS, "await ctx.report_progress(", "await asyncio.sleep(0) or (  # mutant M209\n"),),
        (f"{MT}::test_progress_notifications_carry_the_latest_lines",),
    ),
    Mutant(
        "M210",
        "MCP: a crash is explained, and the next call runs in a fresh Julia",
        (
            Edit(
                MCPS,
                "except JuliaDiedError as exc: return [Output(",
                "except JuliaDiedError as exc:\n        return []  # mutant M210\n"
                "        return [Output(",
            ),
        ),
        (f"{MT}::test_crash_is_explained_and_the_next_call_is_fresh",),
    ),
    Mutant(
        "M211",
        "MCP: a session's first call can choose its project",
        (
            Edit(
                MCPS,
                "args.project = project if project is not None else self.args.project",
                "args.project = self.args.project  # mutant M211",
            ),
        ),
        (f"{MT}::test_sessions_are_listed",),
    ),
    Mutant(
        "M212",
        "MCP: julia_restart gives the session a fresh Julia",
        (Edit(MCPS, "await s.supervisor.restart()", "pass  # mutant M212"),),
        (f"{MT}::test_restart_loses_state",),
    ),
    Mutant(
        "M213",
        "the MCP SDK is an optional extra: the kernel and the agent do not import it",
        (
            Edit(
                AGENT,
                "from .transcript import Output,",
                "from . import mcp as _mcp  # noqa: F401  mutant M213\n"
                "from .transcript import Output,",
            ),
        ),
        (f"{MT}::test_a_plain_kernel_import_does_not_load_the_sdk",),
    ),
    Mutant(
        "M216",
        "the kernel starts on Julia 1.6+, whose start-up stderr is an IOContext under --color",
        (Edit(JK_CAPTURE, "wr_err = stream_on_fd2(stderr)", "wr_err = stderr  # mutant M216"),),
        (f"{CT}::test_the_contracts_took_hold",),
    ),
    Mutant(
        "M217",
        "an execution that stores no history takes no count and leaves In, Out and ans alone",
        (Edit(KER, "stores = store_history and not silent", "stores = not silent  # M217"),),
        (f"{KC}::test_a_request_that_stores_no_history_takes_no_count",),
    ),
    Mutant(
        "M218",
        "the user's JULIA_NUM_THREADS wins over the kernel's default thread count",
        (
            Edit(
                PROC,
                'asked = asks_for_threads(self.julia_args) or env.get("JULIA_NUM_THREADS", "") != ""',
                "asked = asks_for_threads(self.julia_args)  # mutant M218",
            ),
        ),
        (f"{KENV}::test_the_users_thread_count_wins",),
    ),
    Mutant(
        "M219",
        "every import path below IJulia (import IJulia.CommManager: Comm) binds the kernel's module",
        (
            Edit(
                JK_REPL,
                "is_ijulia_path(p) && return Expr(:., :Main, p.args...)",
                "p == Expr(:., :IJulia) && return Expr(:., :Main, p.args...)  # mutant M219",
            ),
        ),
        (f"{RP}::test_every_import_of_ijulia_binds_the_kernels_module",),
    ),
    Mutant(
        "M220",
        "an included file's import of IJulia binds the kernel's module",
        (
            Edit(
                JK_REPL,
                "return include_mapped(local_ijulia_imports(ast.args[2]))",
                "return ast  # mutant M220",
            ),
        ),
        (f"{RP}::test_every_import_of_ijulia_binds_the_kernels_module",),
    ),
    Mutant(
        "M221",
        "a user's own include method is called as written",
        (
            Edit(
                JK_REPL,
                "mapped = Expr(:&&, Expr(:call, isa, x, AbstractString), Expr(:call, applicable, f, map, x))",
                "mapped = Expr(:call, applicable, f, map, x)  # mutant M221",
            ),
        ),
        (f"{RP}::test_a_user_include_method_stays_the_users",),
    ),
    Mutant(
        "M222",
        "an import of a name the kernel's IJulia lacks is an error that names it",
        (Edit(JK_REPL, "lacking = ijulia_path_lacking(ast)", "lacking = nothing  # M222"),),
        (f"{RP}::test_an_ijulia_path_the_kernel_lacks_is_named",),
    ),
)


def _pattern(find: str) -> re.Pattern[str]:
    if find.startswith("(?re)"):
        return re.compile(find[5:], re.MULTILINE)
    return re.compile(r"\s+".join(re.escape(word) for word in find.split()))


class PatternError(Exception):
    """A mutant's pattern does not match exactly once: the code it targets changed."""


def apply(mutant: Mutant, tree: Path) -> None:
    """Apply the mutant's edits to ``tree``; raise PatternError naming a pattern not found."""
    for edit in mutant.edits:
        path = tree / edit.file
        text = path.read_text()
        matches = list(_pattern(edit.find).finditer(text))
        if len(matches) != 1:
            what = "not found" if not matches else f"found {len(matches)} times"
            msg = f"mutant {mutant.id}: pattern {what} in {edit.file}: {edit.find!r}"
            raise PatternError(msg)
        m = matches[0]
        path.write_text(text[: m.start()] + edit.replace + text[m.end() :])


def copy_tree(dest: Path, rev: str | None) -> None:
    """The working tree's files (tracked and new, not ignored), or those of commit ``rev``."""
    if rev is not None:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    files = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            target = dest / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


def pytest_args(tests: tuple[str, ...]) -> list[str]:
    files = sorted({t.split("::")[0] for t in tests})
    names = sorted({t.split("::")[1] for t in tests if "::" in t})
    return [*files, *(["-k", " or ".join(names)] if names else [])]


def run_tests(
    tree: Path, tests: tuple[str, ...], env: dict[str, str], timeout: float = RUN_TIMEOUT
) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
           *pytest_args(tests)]  # fmt: skip
    # The tree's Julia side is compiled first, into a cache depot inside the tree, as
    # `make setup` does for a checkout: kernels then start the way users' kernels do.
    full_env = {**os.environ, **env, "PYTHONPATH": str(tree),
                "JUTUL_JKERNEL_DEPOT": str(tree / ".jkernel-depot")}  # fmt: skip
    compiled = subprocess.run(
        ["julia", "--startup-file=no", str(tree / "julia" / "server.jl"), "--precompile"],
        env=full_env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
    )  # fmt: skip
    if compiled.returncode != 0:
        return -1, f"compiling the tree's Julia side failed:\n{compiled.stdout}{compiled.stderr}"
    try:
        done = subprocess.run(
            cmd, cwd=tree, env=full_env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return -1, f"no result within {timeout:g} s"
    return done.returncode, done.stdout + done.stderr


def summary(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ids", nargs="*", help="mutant ids (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--tree", metavar="REV", help="mutate this commit's tree instead")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unbroken run")
    parser.add_argument(
        "--check", action="store_true", help="only check that every pattern applies"
    )
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.ids or m.id in args.ids]
    unknown = set(args.ids) - {m.id for m in MUTANTS}
    if unknown:
        parser.error(f"no such mutant: {', '.join(sorted(unknown))}")
    if args.list:
        for m in chosen:
            print(f"{m.id:4} {m.promise}\n     guarded by {', '.join(m.tests)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="jk-mutants-") as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        copy_tree(base, args.tree)
        inapplicable = {}
        for m in chosen:  # every pattern must be found before anything runs
            probe = Path(tmp) / "probe"
            shutil.copytree(base, probe)
            try:
                apply(m, probe)
            except PatternError as exc:
                if args.tree is None:
                    raise SystemExit(str(exc)) from None
                inapplicable[m.id] = str(exc)  # another commit's code: report, go on
            shutil.rmtree(probe)
        chosen = [m for m in chosen if m.id not in inapplicable]
        for mid in inapplicable:
            print(f"{mid:4} {'n/a (code not in this tree)':28}")
        if args.check:
            print(f"{len(chosen)} mutants apply")
            return 0
        if not args.no_baseline:
            tests = tuple(sorted({t for m in chosen for t in m.tests}))
            env = {k: v for m in chosen for k, v in m.env.items()}
            code, out = run_tests(base, tests, env, BASELINE_TIMEOUT)
            if code not in (0, 5):
                print(out[-3000:])
                print(f"baseline: the guarding tests fail without any mutant ({summary(out)})")
                return 2
            print(f"baseline: guarding tests pass unbroken ({summary(out)})", flush=True)
        survived = errors = 0
        for m in chosen:
            tree = Path(tmp) / m.id
            shutil.copytree(base, tree)
            apply(m, tree)
            t0 = time.monotonic()
            code, out = run_tests(tree, m.tests, m.env)
            took = time.monotonic() - t0
            if code == 1:
                verdict = "killed"
            elif code in (0, 5):  # 5: no guarding test exists in this tree
                verdict = "survived" if code == 0 else "survived (no guarding test)"
                survived += 1
            else:
                verdict = f"error (pytest exit {code})"
                errors += 1
            print(f"{m.id:4} {verdict:28} {took:6.0f} s  {m.promise}", flush=True)
            if code not in (0, 1, 5):
                print("     " + "\n     ".join(out.strip().splitlines()[-15:]))
            shutil.rmtree(tree)
    print(f"{len(chosen) - survived - errors} killed, {survived} survived, {errors} errors")
    return 1 if survived or errors else 0


if __name__ == "__main__":
    sys.exit(main())
