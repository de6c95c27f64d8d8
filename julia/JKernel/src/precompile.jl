# precompile.jl: the signatures compiled into the package cache, so a kernel does not spend its
# first seconds inferring its own loops (gdb on the script version: ~2 s in type inference of
# eval_loop and run_cell after every start).
#
# Julia 1.5-1.8 caches the inferred code of these (and what they call with concrete types);
# Julia 1.9+ also caches their native code (pkgimages). Only explicit signatures: running the
# server at precompile time would need a socket and a supervisor. What Base compiles for
# user-facing values (showerror, printing arrays) cannot be cached by this package on 1.5; the
# idle warm-up in eval.jl (warm_up_steps) does that after the handshake.
# Keep this list to the hot paths: the handshake, the loops, a cell with output and a result,
# an error, a display, and the three queries. `julia --trace-compile=FILE server.jl` shows what
# still compiles at run time.
#
# Only while writing the cache: loaded from source (the fallback) these would infer everything
# before the handshake, which is slower than inferring each on first use.

function precompile_workload()
    BT = Vector{Union{Ptr{Nothing},Base.InterpreterIP}}
    PIPE_STDIO = StdioContext
    # start-up and the handshake
    precompile(main, ())
    precompile(main, (Vector{String},))
    # libuv's connect callback is reached from C, so nothing of ours infers it (~18 ms on 1.10);
    # 1.12 split it into Sockets.uv_connectcb_pipe and Sockets.uv_connectcb_tcp
    for cb in (:uv_connectcb, :uv_connectcb_pipe, :uv_connectcb_tcp)
        isdefined(Sockets, cb) && precompile(getfield(Sockets, cb), (Ptr{Nothing}, Int32))
    end
    precompile(stream_on_fd2, (Base.PipeEndpoint,))
    precompile(json, (IOBuffer, Int32))   # the handshake's pid: getpid() is an Int32
    precompile(flush_quietly, (PIPE_STDIO,))
    precompile(flush_quietly, (Base.PipeEndpoint,))
    precompile(flush_pending, (Base.PipeEndpoint,))   # put_marker's pipes are PIPES' (Any)
    precompile(serve, (Vector{String},))
    precompile(watch_parent!, ())
    precompile(redirect_output!, ())
    precompile(set_up_main!, ())
    precompile(install_interrupt_sink!, ())
    precompile(watch_event_loop!, ())
    precompile(loop_stamp, (Ptr{Cvoid},))
    precompile(stamp_event_loop!, ())
    precompile(interrupt_sink_loop, ())
    precompile(stdio_context, (Base.PipeEndpoint, Bool, String))
    precompile(Base.flush, (PIPE_STDIO,))
    precompile(Base.println, (PIPE_STDIO, String))
    precompile(ConsoleLogger, (PIPE_STDIO,))
    precompile(send_frame, (String, String))
    precompile(send_frame, (String, String, String))
    precompile(send_frame, (String, String, Vector{UInt8}))
    for P in (String, Vector{UInt8})   # with a marker: the keyword-argument method
        precompile(Core.kwfunc(send_frame), (NamedTuple{(:mark,),Tuple{Int}}, typeof(send_frame),
                                             String, String, P))
    end
    precompile(send_mark, (Int,))
    precompile(Base.unsafe_write, (PIPE_STDIO, Ptr{UInt8}, UInt))
    precompile(Base.write, (PIPE_STDIO, UInt8))
    precompile(json, (Dict{String,Any},))
    precompile(json, (Dict{String,String},))
    precompile(json, (Dict{String,Bool},))   # the comm_target query's answer
    precompile(knows_target, (Symbol,))

    # the long-lived tasks
    precompile(eval_loop, ())
    precompile(query_loop, ())
    precompile(listen_loop, ())
    for S in (Base.PipeEndpoint, TCPSocket)   # the supervisor's socket: Unix, or TCP on Windows
        precompile(read_available!, (Vector{UInt8}, S, Vector{UInt8}))
        precompile(eof, (S,))
    end
    precompile(flusher_loop, ())
    precompile(thread_one_loop, ())
    precompile(pump, (Base.PipeEndpoint, String))
    precompile(parse_frames!, (Vector{UInt8}, typeof(handle_frame)))
    precompile(handle_frame, (String, Int, Vector{SubString{String}}, Vector{UInt8}))
    precompile(forward_interrupt, ())
    precompile(forward_output!, (Vector{UInt8}, String))
    precompile(send_output, (String, Vector{UInt8}, Int, Int))
    precompile(drain_output, ())
    precompile(drain_output, (Bool,))
    precompile(flush_all, ())
    precompile(set_buffering!, (Bool,))
    precompile(end_current_cell!, ())
    precompile(rate_window, (Int, Bool))
    # what set_buffering! reaches in Base by runtime dispatch (the workload cannot run it: no
    # pipes), compiled at run time otherwise
    precompile(Base.buffer_writes, (Base.PipeEndpoint, Int))
    precompile(Base.bytesavailable, (IOBuffer,))
    precompile(print, (PIPE_STDIO, String, Char))
    precompile(drop_torn_sends, ())   # at the start of every cell
    # the exit when the supervisor closes the socket (shutdown, restart): compiled there, it
    # held up the exit by a tenth of a second or more on a loaded machine
    precompile(release_workers, ())

    # a cell: parse, evaluate, output, result, error
    precompile(warm_up_steps, ())
    precompile(still_idle, (Int,))
    precompile(run_step, (Tuple,))
    # the warm-up's own steps (eval.jl): compiled at run time, each was 40-70 ms that a query
    # arriving meanwhile waited for (warm_cell: the workload below runs it)
    precompile(warm_buffering, ())
    precompile(warm_subshell_cell, (Module,))
    precompile(evaluate, (Int, String, String, Bool))
    precompile(run_cell, (Module, String, String, Int))
    precompile(run_cell, (Module, String, String))
    precompile(parse_cell, (String, String))
    precompile(eval_cell, (Module, String, String))
    precompile(mode_line, (String,))
    precompile(cell_number, (String, Int))
    precompile(local_ijulia_imports, (Any,))   # a cell's AST, node by node
    precompile(ijulia_path_lacking, (Expr,))
    precompile(is_signature, (Any,))   # a cell that defines a function
    precompile(run_startup_files, ())
    precompile(compile_worker_handling, ())
    # run after every evaluation; uncompiled, it held back the first cell's result 1.0-2.4 s
    # on 1.5.3 (0.16-0.39 s with it), though with no workers it returns at once
    precompile(update_lifelines, ())
    precompile(capped, (String,))
    precompile(println, (PIPE_STDIO, String))
    # a cell's `println("...")` to stdout: Base's one-argument method dispatches to ours
    # (StdioContext) at run time, and compiled then (5 ms of a session's first print, 1.10.0)
    precompile(println, (String,))
    precompile(print, (String,))
    precompile(write, (Base.PipeEndpoint, Vector{UInt8}))   # our println's one write
    precompile(set_main_global!, (Symbol, Any))   # `ans` after every named cell
    precompile(IJulia.record_value!, (Any,))
    precompile(print, (PIPE_STDIO, String))
    for T in (Nothing, Int, Float64, String, Bool, Vector{Int}, Vector{Float64}, Matrix{Float64},
              Dict{String,Int}, Dict{Int,Int})
        precompile(mime_bundle, (T,))
        precompile(plain_text, (T,))
    end
    precompile(finish_evaluation, (Int, CellOutcome))
    for E in (ErrorException, UndefVarError, MethodError, BoundsError, InterruptException,
              ArgumentError, DomainError, LoadError)
        precompile(error_report, (E, BT))
        precompile(is_interrupt, (E,))
    end
    precompile(the_interrupt, (InterruptException,))
    precompile(user_backtrace, (BT, Bool))
    precompile(frames_at, (Ptr{Cvoid},))
    # a main cell's error and interrupt: the warm-up runs neither (no cell number, no
    # evaluation); uncompiled, the first interrupt of a session spent 0.7 s here (1.10)
    precompile(set_err!, (Any,))
    precompile(interrupt_remote_workers, ())

    # a subshell's request (beside.jl)
    precompile(queue_beside, (Int, Evaluation))
    precompile(queue_beside, (Int, CommDelivery))
    precompile(beside_worker, ())
    precompile(beside_result, (EvalCtx, Evaluation))
    precompile(beside_result, (EvalCtx, CommDelivery))
    precompile(finish_beside, (EvalCtx, CellOutcome))
    precompile(run_cell, (Module, String, String, Int, EvalCtx))
    precompile(interrupt_beside, (EvalCtx,))
    precompile(write_between, (Vector{UInt8}, Ptr{UInt8}, UInt))
    precompile(route_head, (Int, Char))
    precompile(current_ctx, ())

    # display
    precompile(display, (Any,))
    precompile(display, (Vector{Int},))
    precompile(Base.Multimedia.display, (KernelDisplay, Any))
    precompile(Base.Multimedia.display, (KernelDisplay, MIME"text/html", HTML{String}))
    precompile(mime_bundle, (HTML{String}, MIME"text/html"))
    precompile(display_message, (Any, Nothing, Nothing, Bool))
    precompile(send_display_here, (Dict{String,Any},))

    # queries
    precompile(answer_query, (String, String, Int))
    precompile(syntax_status, (String,))
    precompile(parsed_status, (String,))
    precompile(completion_string, (REPL.REPLCompletions.ModuleCompletion,))
    precompile(next_indent, (String,))
    precompile(identifier_at, (String, Int))
    precompile(json, (Vector{String},))

    # Run the hot paths once as well: on 1.5-1.8 this infers what they reach through dynamic
    # calls (mime_bundle of the value, error_report of the error, completions), on 1.9+ it
    # also caches the native code. Cells evaluate in JKernel itself, the one module open for
    # evaluation while precompiling, and assign nothing; run_cell catches every error.
    for code in ("1 + 1", "nothing", "error(\"e\")", "[1, 2]", "[1.0, 2.0]", "\"s\"",
                 "undefined_name_", "1 + \"a\"", "[1][2]", "[1.0 2.0; 3.0 4.0]",
                 "Dict(\"a\" => 1)", "1;")
        warm_cell(@__MODULE__, code)   # as a warm-up step runs a cell (eval.jl)
    end
    # a cell that loads packages: its AST through local_ijulia_imports and the REPL's
    # transforms (eval.jl eval_cell), without evaluating it; uncompiled, the first `using` of a
    # session took 26 ms more than the `using` itself (1.10.0)
    loads = local_ijulia_imports(parse_cell("using Base64\nimport Base64: base64encode", "precompile"))
    for transform in default_ast_transforms(true)
        loads = transform(loads)
    end
    beside = EvalCtx(1, current_task(), false, false, false, UInt8[], UInt8[])
    with_ctx(() -> capped(run_cell(@__MODULE__, "1 + 1", "precompile", 0, beside).text), beside)
    for (op, code, cursor) in (("is_complete", "function f(x)", 0), ("is_complete", "1 + 1", 0),
                               ("complete", "prin", 4), ("inspect", "sum", 3))
        json(answer_query(op, code, cursor))
    end
    # The workload's error cells looked code addresses of this process up: saved with the
    # cache, they came back as 19 entries under a null address, in every session.
    empty!(FRAMES_AT)
    nothing
end

"""
    keeping_dispatched(workload)

Run `workload()` so that the cache also keeps what it reached through runtime dispatch in
other modules' methods. Julia 1.9+ writes native code to the cache only for methods of the
package and for what inference reached from them; a call whose callee is found at run time
starts inference afresh (the REPL's help and Markdown's rendering under an inspect, `show` of a
cell's value), and that code is left out, so without this the first inspect after a start
compiled for 0.65 s on 1.10.0 and 0.96 s on 1.12.5 although the workload had run it.

Each inference that starts during the workload is marked as precompiled, which is what the
cache writer looks for (src/staticdata_utils.c, `mi->precompiled` / JL_MI_FLAGS_MASK_PRECOMPILED):
- where Julia can tag newly inferred code itself (`jl_tag_newly_inferred_enable`,
  src/staticdata_utils.c of release-1.12 and master), it tags everything inferred meanwhile;
- else where inference can record its entry points (`Core.Compiler.Timings`, 1.6-1.11;
  release-1.12 and master keep the module with empty stubs), each recorded method instance is
  `precompile`d, which marks it (src/gf.c, jl_compile_method_instance);
- else (1.5, whose cache holds no native code) the workload just runs.
PrecompileTools' `@compile_workload` does the same on each version (src/workloads.jl).
"""
function keeping_dispatched(workload)
    if has_newly_inferred_tags()
        ccall(:jl_tag_newly_inferred_enable, Cvoid, ())
        try
            workload()
        finally
            ccall(:jl_tag_newly_inferred_disable, Cvoid, ())
        end
    elseif isdefined(Core.Compiler, :Timings) && isdefined(Core.Compiler, :__set_measure_typeinf)
        Core.Compiler.Timings.reset_timings()
        Core.Compiler.__set_measure_typeinf(true)
        try
            workload()
        finally
            Core.Compiler.__set_measure_typeinf(false)
            Core.Compiler.Timings.close_current_timer()
        end
        recorded = Core.Compiler.Timings._timings   # stays empty where the module is a stub
        isempty(recorded) || precompile_inferred(first(recorded))
    else
        workload()
    end
    nothing
end

"""Whether this Julia exports `jl_tag_newly_inferred_enable` (looked up, not assumed)."""
function has_newly_inferred_tags()
    try
        cglobal(:jl_tag_newly_inferred_enable) != C_NULL
    catch
        false   # "could not load symbol"
    end
end

"""`precompile` each method instance whose inference the timing tree `node` recorded."""
function precompile_inferred(node)
    for child in node.children
        mi = child.mi_info.mi
        # By its signature, as jl_compile_hint takes it: 1.10's precompile(::MethodInstance)
        # passes C_NULL for the types as `Any` (base/loading.jl), which fails after marking.
        # A top-level thunk's def is a Module: nothing to compile again.
        mi.def isa Method && precompile(mi.specTypes)
        precompile_inferred(child)
    end
end

ccall(:jl_generating_output, Cint, ()) == 1 && keeping_dispatched(precompile_workload)
