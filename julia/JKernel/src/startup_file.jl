# startup_file.jl: the user's startup file, run at the start of the first cell.

"""
    run_startup_files()

Run the startup files (`~/.julia/config/startup.jl` and the system-wide one) once, as the REPL
and IJulia do, at the start of the first evaluation (whatever its mode), inside it: the files'
output appears there, an interrupt stops them like any cell, and an error is shown there while
the cell itself still runs. Julia is started with --startup-file=no because an error in a
startup file ends a script (here: before the handshake).
"""
function run_startup_files()
    STARTUP_PENDING[] = false
    try
        load_startup_files()
    catch e
        bt = catch_backtrace()
        is_interrupt(e) && rethrow()
        report_startup_error(e, bt)
    end
    nothing
end

function report_startup_error(e, bt)
    frames = user_backtrace(bt)
    # Base's include and load_julia_startup frames below the file itself tell the user nothing.
    last_own = findlast(f -> f.func === Symbol("top-level scope"), frames)
    last_own === nothing || (frames = frames[1:last_own])
    io = IOBuffer()
    ctx = IOContext(io, :color => COLOR[])
    printstyled(ctx, "ERROR: "; bold = true, color = :red)
    println(ctx, "the startup file failed; the session goes on without the rest of it.")
    showerror(ctx, e)
    isempty(frames) || Base.show_backtrace(ctx, frames)
    println(ctx)
    write(stderr, take!(io))
    flush(stderr)
end
