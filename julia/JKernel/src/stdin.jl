# stdin.jl: `stdin`, `input` and Base's prompts read lines the front end asks the user for
# (INP/TXT/NIN; the supervisor turns INP into Jupyter's input_request on the stdin channel).

mutable struct KernelStdin <: IO
    buf::IOBuffer
end

"""
    JKernel.input(prompt=""; password=false) -> String

Ask the frontend for one line (Jupyter's input_request); `readline()` does the same.
"""
input(prompt::AbstractString = ""; password::Bool = false) =
    ask_line("JKernel.input", prompt, password)

"""
    ask_line(asker, prompt, password) -> String

Ask the frontend for one line, showing `prompt` (hiding what is typed when `password`). When
no line can be had (no cell runs, or the frontend takes no input: Jupyter's `allow_stdin` is
false under nbconvert and papermill) the error names `asker`, the call that wanted the line.
"""
function ask_line(asker::String, prompt::AbstractString, password::Bool)
    output_ctx() === nothing ||
        error(asker, " needs a line from the frontend, but stdin is not available in a subshell")
    on_thread_one(() -> input_here(asker, prompt, password))
end
function input_here(asker::String, prompt::AbstractString, password::Bool)
    id = CURRENT[]
    id == 0 && error(asker, " needs a line from the frontend, but stdin can only be read ",
                     "while a cell runs")
    ch = Channel{Any}(1)
    server_section() do
        mark = drain_output()
        INPUT_WAIT[] = ch
        send_frame(FrameKind.INP, string(id, password ? " 1" : " 0"), String(prompt); mark = mark)
    end
    reply = try
        take!(ch)
    finally
        INPUT_WAIT[] = nothing
    end
    # TXT puts the line, NIN an ErrorException saying why there is none (wire.jl)
    reply isa ErrorException &&
        error(asker, " needs a line from the frontend, but ", reply.msg)
    return reply::String
end

function fill_line!(io::KernelStdin, asker::String = "reading stdin")
    bytesavailable(io.buf) > 0 && return
    line = ask_line(asker, "", false)
    write(io.buf, line, '\n')
    nothing
end
Base.eof(io::KernelStdin) = (fill_line!(io); false)
Base.isopen(::KernelStdin) = true
Base.bytesavailable(io::KernelStdin) = bytesavailable(io.buf)
Base.read(io::KernelStdin, ::Type{UInt8}) = (fill_line!(io); read(io.buf, UInt8))
Base.readavailable(io::KernelStdin) = (fill_line!(io); take!(io.buf))
function Base.readline(io::KernelStdin; keep::Bool = false)
    fill_line!(io, "readline(stdin)")
    return readline(io.buf; keep = keep)
end

# ---- Base's prompts ----
#
# `Base.getpass(message)` calls `getpass(stdin, stdout, message)` and `Base.prompt(message;
# default)` calls `prompt(stdin, stdout, message; default)`, "to allow new methods to be defined
# if stdin has been redirected to some custom stream, e.g. in IJulia" (JuliaLang/julia
# release-1.10, release-1.12 and master base/util.jl). Base's own `getpass` takes a `TTY` only,
# and its `prompt(::IO, ::IO, ...)` would print the message to stdout and ask the frontend with
# an empty prompt. LibGit2 asks for credentials through these two (stdlib/LibGit2/src/
# callbacks.jl, same three branches: `Base.prompt("Username for '$url'", default=...)`,
# `Base.getpass("Password for '$url'")`). As IJulia's methods (src/stdio.jl), the message
# becomes the input_request's prompt; the output stream is not written to.

@static if isdefined(Base, :getpass) && isdefined(Base, :SecretBuffer)
    # release-1.12 and master add `with_suffix` (": " after the message, the default); 1.10
    # passes no keyword. Base returns a SecretBuffer positioned at its start, which LibGit2
    # stores as the password (`cred.pass = response`).
    function Base.getpass(::KernelStdin, ::IO, message::AbstractString; with_suffix::Bool = true)
        line = ask_line(string("Base.getpass(", repr(message), ")"),
                        with_suffix ? string(message, ": ") : message, true)
        s = Base.SecretBuffer()
        write(s, line)
        return seekstart(s)
    end
end

@static if isdefined(Base, :prompt)
    # Base's message format ("message [default]: ") and its answer: the line without its
    # newline, or `default` for an empty one. A frontend has no end of file, so never `nothing`.
    function Base.prompt(::KernelStdin, ::IO, message::AbstractString;
                         default::AbstractString = "")
        shown = isempty(default) ? string(message, ": ") : string(message, " [", default, "]: ")
        line = chomp(ask_line(string("Base.prompt(", repr(message), ")"), shown, false))
        return isempty(line) ? String(default) : String(line)
    end
end
