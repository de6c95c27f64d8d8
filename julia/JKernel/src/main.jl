# main.jl: start-up: connect, redirect, install the display and the interrupt sink, handshake.

function watch_parent!()
    @static if Sys.islinux()
        # PR_SET_PDEATHSIG: the kernel kills us when the process that started us dies, even if
        # a cell never yields (a SIGKILLed supervisor runs no cleanup code).
        ccall(:prctl, Cint, (Cint, Culong, Culong, Culong, Culong), 1, 9, 0, 0, 0)
        ccall(:getppid, Cint, ()) == 1 && exit(0)   # parent already gone before prctl
    end
    nothing
end

# isinteractive() is true while the server runs (compat.jl, interactive_session).
main(args = ARGS) = interactive_session(() -> outside_cancel_scope(() -> serve(args)))

"""
    running_julia_path()

The path of the Julia binary that runs this server, for the kernel's banner: the supervisor may
have started a launcher (juliaup's `julia +1.10`) that chose it.
"""
function running_julia_path()
    # Sys.BINDIR is documented (doc/src/base/constants.md) and set at start-up from
    # jl_get_julia_bindir on JuliaLang/julia release-1.10, release-1.12 and master
    # (base/sysinfo.jl). Base.julia_exename is internal, the same on those three branches
    # (base/util.jl: "julia", "julia-debug" for a debug build, ".exe" on Windows).
    exename = isdefined(Base, :julia_exename) ? Base.julia_exename() :
              Sys.iswindows() ? "julia.exe" : "julia"
    return joinpath(Sys.BINDIR, exename)
end

"""
    set_display_size!()

The size every display renders to, IJulia's: 30 lines by 80 columns unless the environment
names one (JuliaLang/IJulia.jl src/kernel.jl, `run_kernel`, sets `LINES` and `COLUMNS` the same
way), so a help text wraps and a long table is cut where IJulia's are, and child processes and
`displaysize()` see the same size.
"""
function set_display_size!()
    ENV["LINES"] = get(ENV, "LINES", "30")
    ENV["COLUMNS"] = get(ENV, "COLUMNS", "80")
    nothing
end

"""Names cells see without qualification: `In`, `Out`, `IJulia`, and `err` where Julia has none."""
function set_up_main!()
    SOFTSCOPE[] = !(lowercase(get(ENV, "JUTUL_JKERNEL_SOFTSCOPE", "yes")) in ("no", "0", "false", "off"))
    # Julia 1.9+ exports `err` from Base.MainInclude to Main: a second export would be ambiguous.
    main_include_has(:err) || Core.eval(MainNames, :(export err))
    # A package is not bound in Main as the script was: cells call `JKernel.display` and the
    # like, so bind the module itself (a user's `using JKernel` still finds no package).
    isdefined(Main, :JKernel) || Core.eval(Main, :(const JKernel = $JKernel))
    Core.eval(Main, :(using .JKernel.MainNames))
end

# The supervisor listens on a Unix socket on POSIX and names its path; on Windows it names a
# loopback port (jutul_jkernel/supervisor/rendezvous.py says why no port on POSIX). Sockets.connect(path)
# is documented: "Connect to the named pipe / UNIX domain socket at path" -> PipeEndpoint
# (JuliaLang/julia stdlib/Sockets/src/PipeServer.jl, release-1.10, release-1.12 and master).
function connect_supervisor(address::AbstractString)
    port = tryparse(Int, address)
    port === nothing && return Sockets.connect(address)
    sock = connect(ip"127.0.0.1", port)
    Sockets.nagle(sock, false)
    return sock
end

function serve(args)
    Base.exit_on_sigint(false)
    DIAG[] = stderr
    length(args) == 1 || (diag("usage: julia server.jl <socket path | port>"); exit(2))
    address = args[1]
    empty!(ARGS)   # user code sees no kernel arguments, as in the REPL and IJulia
    # --color=yes (the kernelspec's default). JuliaLang/julia base/client.jl exec_options sets
    # have_color from the flag: `color_set ? (opts.color == 1) : nothing` in 1.5.3, and
    # `colored_text(opts)` in the release-1.12-era copy read (the one with `-m` entry points).
    COLOR[] = Base.have_color === true
    STARTUP_PENDING[] = get(ENV, "JUTUL_JKERNEL_STARTUP_FILE", "yes") != "no"
    delete!(ENV, "JUTUL_JKERNEL_STARTUP_FILE")
    token = get(ENV, "JUTUL_JKERNEL_TOKEN", "")
    isempty(token) && (diag("JUTUL_JKERNEL_TOKEN is not set"); exit(2))
    delete!(ENV, "JUTUL_JKERNEL_TOKEN")   # user code and child processes must not see it
    CLAIMS_DIR[] = get(ENV, "JUTUL_JKERNEL_CLAIMS", "")   # see claim_interrupt
    delete!(ENV, "JUTUL_JKERNEL_CLAIMS")
    loop_page = watch_event_loop!()
    watch_parent!()
    SOCK[] = connect_supervisor(address)
    # RDY first: the supervisor gives a connection 5 s to say who it is (handshake.py), and
    # what follows is compiled at run time when JKernel loads without a compile cache (a
    # first start, or beside a kernel that is compiling it): seconds on a loaded machine.
    send_frame(FrameKind.RDY, token)

    redirect_output!()
    # IJulia's "original" streams are where its log goes, not the notebook: here the log.
    IJulia.orig_stdout[] = IJulia.orig_stderr[] = DIAG[]
    Core.eval(Base, :(stdin = $(KernelStdin(PipeBuffer()))))
    pushdisplay(KernelDisplay())
    set_display_size!()
    set_up_main!()
    install_interrupt_sink!()
    # schedule(Task(f)), not `@async f()`: the closure @async makes is compiled at every start.
    schedule(Task(flusher_loop))
    schedule(Task(thread_one_loop))

    # The interrupt path must never wait for the compiler: a first INT frame that took the
    # listener a second to compile (on a loaded machine) was escalated to a forced SIGINT,
    # and a SIGINT forced into the compiler leaves Julia unusable. ~10 ms here.
    precompile(handle_frame, (String, Int, Vector{SubString{String}}, Vector{UInt8}))
    precompile(forward_interrupt, ())
    send_frame(FrameKind.INF, "", json(Dict("julia_version" => string(VERSION), "pid" => getpid(),
                                    "julia_path" => running_julia_path(),
                                    "threads" => Threads.nthreads(),
                                    "loaded_from" => LOADED_FROM[],
                                    "loop_page" => loop_page)))
    # A session's first is_complete ran its parse cold, 280 us against 125 later (1.10.0), and
    # a console or a client asks one right after kernel_info: run once while the kernel
    # process answers that (~0.3 ms).
    try
        answer_query("is_complete", "function f(x)", 0)
    catch e
        e isa InterruptException && rethrow()
    end
    EVAL_TASK[] = schedule(Task(eval_loop))   # after the handshake: its warm-up must wait
    schedule(Task(query_loop))
    listener = schedule(Task(listen_loop))
    guarded("main") do
        wait(listener)
        false
    end
    exit(0)
end
