# ijulia.jl: what Main sees: In, Out, err, and IJulia's notebook API.

"""
    IJulia

The part of IJulia's API that notebooks call without `using IJulia` (course notebooks call
`IJulia.clear_output(true)` in loops): output clearing, the cell hooks, `load`, and history.
`IJulia.inited` is `true`, which is how packages tell that they run in a notebook. A cell's
`using IJulia` binds this module rather than the IJulia package, whose functions need a kernel
of their own.
"""
module IJulia

import ..JKernel

const inited = true
const In = JKernel.In
const Out = JKernel.Out

"""Clear the cell's output; with `wait=true`, only when new output arrives."""
clear_output(wait::Bool = false) = JKernel.clear_output(wait)

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

"""Accepted for IJulia's notebooks; output is never capped in this kernel."""
function set_max_stdio(n::Integer)
    println(stderr, "IJulia.set_max_stdio($n): jutul-jkernel never caps a cell's output; ",
            "nothing to change.")
    nothing
end

set_verbose(v::Bool = true) = nothing

"""Forget `In` and `Out` (all, or the given cell numbers), so their values can be freed."""
clear_history() = (empty!(In); empty!(Out); nothing)
clear_history(cells) = (foreach(n -> (delete!(In, n); delete!(Out, n)), cells); nothing)

"""Print the code of the cells so far (or of the given cell numbers)."""
history(io::IO = stdout) = history(io, sort!(collect(keys(In))))
history(io::IO, cells) = foreach(n -> haskey(In, n) && println(io, In[n]), cells)

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

send_payload(item::Dict{String,Any}) = on_thread_one(() -> send_payload_here(item))
function send_payload_here(item::Dict{String,Any})
    id = CURRENT[]
    id == 0 && error("this works only while a cell runs")
    send_frame("PAY", string(id), json(item))
    nothing
end
