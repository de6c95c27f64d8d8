# ijulia.jl: what Main sees: In, Out, err, and IJulia's notebook API as packages call it.

"""
    IJulia

IJulia's API as notebooks and packages call it without `using IJulia`: they test
`isdefined(Main, :IJulia) && Main.IJulia.inited` and then call `IJulia.name` (course notebooks
call `IJulia.clear_output(true)` in loops, ProgressMeter `IJulia.reset_stdio_count()`, PyPlot
and RCall push hooks). Written from IJulia 1.34's src/ (JuliaLang/IJulia.jl: IJulia.jl,
display.jl, inline.jl, init.jl, stdio.jl) and 1.29's for the names it had then;
docs/ijulia-packages.md says what works and what does not.

This is not the IJulia package: it is not in `Base.loaded_modules`, under IJulia's UUID or any
other, so code that looks the real package up (Bonito, Plots' extension, Requires blocks) does
not find it. `pkgversion(Main.IJulia)` is the version of JKernel, the package it belongs to,
below 1.30: ProgressMeter then resets `stdio_bytes[]`, as it does for IJulia before 1.30. A
cell's `using IJulia` binds this module (repl.jl, `local_ijulia_imports`).
"""
module IJulia

import ..JKernel

# ---- what tells a package it runs in a notebook, and the history ----

"""`true`: packages test `isdefined(Main, :IJulia) && Main.IJulia.inited`."""
const inited = true
const In = JKernel.In
const Out = JKernel.Out

# IJulia's globals, for notebooks and packages to read (and reset): not server state, which is
# in JKernel's state.jl; the server only writes them.
"""The execution count of the last notebook cell (IJulia's `n`)."""
n = 0
"""The value of the last notebook cell, as `Main.ans` (IJulia's `ans`)."""
ans = nothing

"""Called by run_cell for each notebook cell: its number, then (when it ran) its value."""
record_cell!(cell::Int) = (global n = cell; nothing)
record_value!(@nospecialize(value)) = (global ans = value; nothing)

"""Forget `In` and `Out` (all, or the given cell numbers), so their values can be freed."""
clear_history() = (empty!(In); empty!(Out); record_value!(nothing); nothing)
clear_history(cells) = (foreach(n -> (delete!(In, n); delete!(Out, n)), cells); nothing)

"""Print the code of the cells so far (or of the given cell numbers)."""
history(io::IO = stdout) = history(io, sort!(collect(keys(In))))
history(io::IO, cells) = foreach(n -> haskey(In, n) && println(io, In[n]), cells)

# ---- output ----

"""Clear the cell's output; with `wait=true`, only when new output arrives."""
function clear_output(wait::Bool = false)
    stdio_bytes[] = 0   # IJulia resets its output count here too
    JKernel.clear_output(wait)
end

"""
Bytes written to stdout and stderr in this cell, in IJulia a count towards its cap. This kernel
has no cap (output is never cut), so nothing counts: it exists for code that resets it, such as
ProgressMeter's `printover` for IJulia before 1.30 (`Main.IJulia.stdio_bytes[] = 0`).
"""
const stdio_bytes = Ref{Int}(0)

"""Reset [`stdio_bytes`](@ref) (IJulia 1.30 and newer; ProgressMeter calls it on each redraw)."""
reset_stdio_count() = (stdio_bytes[] = 0)

"""Accepted for IJulia's notebooks; output is never capped in this kernel. Returns `n`, as
IJulia does."""
function set_max_stdio(n::Integer)
    println(stderr, "IJulia.set_max_stdio($n): jutul-jkernel never caps a cell's output; ",
            "nothing to change.")
    return n
end

set_verbose(v::Bool = true) = nothing

"""
Where IJulia's own log goes: the streams the kernel process had before its output was captured
(IJulia writes its verbose log there, and packages their debugging prints). Here both are the
Julia server's log file, never the notebook. Set when the server starts (main.jl).
"""
const orig_stdout = Ref{IO}()
const orig_stderr = Ref{IO}()

# ---- display ----

"""
    InlineDisplay()

IJulia's display, as packages name it (Plots 1.38's `inline()`:
`display(Main.IJulia.InlineDisplay(), plt)`). Showing through it is showing through this
kernel's own display: the same bundle, in the running cell.
"""
struct InlineDisplay <: AbstractDisplay end

Base.display(::InlineDisplay, x) = Base.display(JKernel.KernelDisplay(), x)
Base.display(::InlineDisplay, m::MIME, x) = Base.display(JKernel.KernelDisplay(), m, x)
Base.displayable(::InlineDisplay, m::MIME) = Base.displayable(JKernel.KernelDisplay(), m)

"""IJulia drops `x` from the displays it queued; this kernel queues none, so it returns `x`
(PyPlot's `withfig` calls it)."""
undisplay(x) = x

"""
    display_dict(x) -> Dict{String,String}

The MIME bundle the kernel would show for `x`: MIME type => text, base64 for binary types,
always with `text/plain`. IJulia wraps the JSON types' text in a `JSONText`; here it is the
JSON text itself. Methods added to this function are not used by the kernel's display.
"""
display_dict(x) = Dict{String,String}(JKernel.mime_bundle(x))

"""
    limitstringmime(mime, x, forcetext=false) -> String

`x` shown as `mime` as a Jupyter bundle holds it: text for a text type (or with `forcetext`),
base64 for a binary one.
"""
limitstringmime(mime::MIME, x, forcetext::Bool = false) =
    JKernel.jupyter_string(mime, x, forcetext)

"""
    register_mime(mime)
    register_mime([mime1, mime2, ...])

Also try `mime` in every bundle (of a vector, the first type the value can show), as IJulia
does for types such as `application/pdf`. Returns the registered list.
"""
register_mime(x::Union{MIME,Vector{MIME}}) = push!(JKernel.REGISTERED_MIMES, x)
register_mime(x::AbstractVector{<:MIME}) = push!(JKernel.REGISTERED_MIMES, Vector{MIME}(x))

"""
    register_jsonmime(mime)

As [`register_mime`](@ref), for a type whose data is JSON: the frontend gets the JSON object
(for types named `application/json` or `application/…+json`, which nbformat stores as JSON).
"""
register_jsonmime(x::Union{MIME,Vector{MIME}}) = push!(JKernel.REGISTERED_JSON_MIMES, x)
register_jsonmime(x::AbstractVector{<:MIME}) =
    push!(JKernel.REGISTERED_JSON_MIMES, Vector{MIME}(x))

# ---- hooks ----

push_preexecute_hook(f::Function) = push!(JKernel.PREEXECUTE_HOOKS, f)
push_postexecute_hook(f::Function) = push!(JKernel.POSTEXECUTE_HOOKS, f)
push_posterror_hook(f::Function) = push!(JKernel.POSTERROR_HOOKS, f)
pop_preexecute_hook(f::Function) = pop_hook!(f, JKernel.PREEXECUTE_HOOKS)
pop_postexecute_hook(f::Function) = pop_hook!(f, JKernel.POSTEXECUTE_HOOKS)
pop_posterror_hook(f::Function) = pop_hook!(f, JKernel.POSTERROR_HOOKS)

function pop_hook!(f, hooks)
    i = findlast(isequal(f), hooks)
    i === nothing && error("no such hook: $f")
    return splice!(hooks, i)
end

# ---- cells ----

"""Put `s` into a new cell below this one (Jupyter's set_next_input); `replace=true` replaces
this cell's code instead."""
function load_string(s::AbstractString, replace::Bool = false)
    JKernel.send_payload(Dict("source" => "set_next_input", "text" => String(s),
                              "replace" => replace))
end
"""Put the contents of `filename` into a new cell, like IPython's `%load`."""
load(filename::AbstractString, replace::Bool = false) = load_string(read(filename, String), replace)

"""
    IJulia.readprompt(prompt; password=false) -> String

Ask the frontend for one line, showing `prompt`; with `password=true` it hides what is typed.
See https://jupyter-client.readthedocs.io/en/latest/messaging.html#messages-on-the-stdin-router-dealer-channel
"""
readprompt(prompt::AbstractString; password::Bool = false) =
    JKernel.ask_line("IJulia.readprompt", prompt, password)

# ---- IJulia's internals, which have no meaning here ----

"""
    IJuliaStdio

IJulia's type of `stdout` and `stderr`. This kernel's are Base `IOContext`s (capture.jl), so
nothing is an `IJuliaStdio`: a check such as PlotlyLight's `stdout isa Main.IJulia.IJuliaStdio`
answers `false`, as it would without `Main.IJulia`, instead of failing.
"""
abstract type IJuliaStdio <: IO end

"""The error IJulia's messaging functions throw here: this kernel's Julia sends no Jupyter
messages itself (its supervisor does), so there is nothing for them to send on."""
struct NoJupyterMessaging <: Exception
    name::Symbol
end
Base.showerror(io::IO, e::NoJupyterMessaging) = print(io, "IJulia.", e.name,
    " is IJulia's own Jupyter messaging, which jutul-jkernel does not have (its supervisor ",
    "talks to Jupyter); show output with display(...), IJulia.clear_output() or ",
    "JKernel.update_display(...)")

"""IJulia's current execute request; there is none here (see [`NoJupyterMessaging`](@ref))."""
const execute_msg = nothing
send_ipython(args...; kwargs...) = throw(NoJupyterMessaging(:send_ipython))
msg_pub(args...; kwargs...) = throw(NoJupyterMessaging(:msg_pub))

"""
    IJulia.CommManager

IJulia's comm API (src/comm_manager.jl): `Comm`, `comm_target`, `send_comm`, `close_comm`,
`register_comm` (a package defines methods of it for its targets) and `Msg`, the message a
callback gets. They are JKernel's own (comms.jl), so a method a package adds to
`IJulia.CommManager.register_comm` is the one the kernel calls.
"""
module CommManager
import ..JKernel
import ..JKernel: Comm, Msg, comm_target, send_comm, close_comm, register_comm
export Comm, comm_target, send_comm, close_comm, register_comm
"""The open comms, by id (IJulia's `CommManager.comms`)."""
const comms = JKernel.COMMS
end # module CommManager

end # module IJulia

"""Names every cell sees through `using` (so a user's own definition simply shadows them)."""
module MainNames
import ..JKernel
const In = JKernel.In
const Out = JKernel.Out
const IJulia = JKernel.IJulia
err = nothing
export In, Out, IJulia   # and `err` on Julia without Base.MainInclude.err: see set_up_main!
end

function send_payload(item::Dict{String,Any})
    c = output_ctx()
    on_thread_one(() -> send_payload_here(item, c))
end
function send_payload_here(item::Dict{String,Any}, c::Union{Nothing,EvalCtx} = nothing)
    id = c === nothing ? CURRENT[] : c.id
    id == 0 && error("this works only while a cell runs")
    send_frame(FrameKind.PAY, string(id), json(item))
    nothing
end
