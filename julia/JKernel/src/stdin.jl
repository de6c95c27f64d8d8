# stdin.jl: `stdin` and `input` read lines the front end asks the user for (INP/TXT/NIN).

mutable struct KernelStdin <: IO
    buf::IOBuffer
end

"""
    JKernel.input(prompt=""; password=false) -> String

Ask the frontend for one line (Jupyter's input_request); `readline()` does the same.
"""
input(prompt::AbstractString = ""; password::Bool = false) =
    on_thread_one(() -> input_here(prompt, password))
function input_here(prompt::AbstractString, password::Bool)
    id = CURRENT[]
    id == 0 && error("stdin can only be read while a cell runs")
    ch = Channel{Any}(1)
    server_section() do
        mark = drain_output()
        INPUT_WAIT[] = ch
        send_frame("INP", string(id, password ? " 1" : " 0"), String(prompt); mark = mark)
    end
    reply = try
        take!(ch)
    finally
        INPUT_WAIT[] = nothing
    end
    reply isa Exception && throw(reply)
    return reply::String
end

function fill_line!(io::KernelStdin)
    bytesavailable(io.buf) > 0 && return
    line = input()
    write(io.buf, line, '\n')
    nothing
end
Base.eof(io::KernelStdin) = (fill_line!(io); false)
Base.isopen(::KernelStdin) = true
Base.bytesavailable(io::KernelStdin) = bytesavailable(io.buf)
Base.read(io::KernelStdin, ::Type{UInt8}) = (fill_line!(io); read(io.buf, UInt8))
Base.readavailable(io::KernelStdin) = (fill_line!(io); take!(io.buf))
function Base.readline(io::KernelStdin; keep::Bool = false)
    fill_line!(io)
    return readline(io.buf; keep = keep)
end
