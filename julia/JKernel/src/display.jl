# display.jl: MIME bundles, `display`, `update_display` and `clear_output` as frames.

struct KernelDisplay <: AbstractDisplay end

"""MIME bundle of `x`: text/plain always, plus the rich types `x` can show (RICH_MIMES and
JSON_MIMES in state.jl), plus those registered through `IJulia.register_mime` and
`register_jsonmime`, in that order; of each group the first type `x` can show (IJulia
src/display.jl, `_display_dict`).

The value is taken unspecialised (`@nospecialize`) here and by every function below that
takes it, as IJulia's display path does: each function a cell defines, and each new struct,
is a type of its own, and specialised on it, the path compiled anew for every one (the first
function definition of a session took 131-147 ms, IJulia's 24-26, on 1.10.0)."""
function mime_bundle(@nospecialize(x))
    data = Dict{String,Any}()
    for (m, json) in bundle_mimes(x)
        if !json
            data[string(m)] = jupyter_string(m, x)
            continue
        end
        try   # a JSON type is shown as text, and one whose `show` fails is left out (IJulia)
            data[string(m)] = jupyter_string(m, x, true)
        catch e
            is_interrupt(e) && rethrow()
        end
    end
    data["text/plain"] = plain_text(x)
    return data
end

const BundleMimes = Vector{Tuple{MIME,Bool}}   # (type, whether it travels as JSON)

"""
    bundle_mimes(x) -> Vector{Tuple{MIME,Bool}}

The types besides text/plain that `x`'s bundle holds, in order, each with whether it travels
as JSON: of each group the first type `x` is `showable` as, unless an earlier group gave it.

Base's `showable(m, x)` searches the method table for `show(::IO, m, ::typeof(x))` (about 8 µs
each on 1.5.3, 0.7 on 1.10), and a bundle asks 17 of them: most of a trivial cell's time in
Julia. Its answer changes only when a method is defined (the world counter moves) or the
registered types change, so the list is kept per type until then. A type whose `showable` is
a package's own (which may answer by the value, as Base's docstring allows; Luxor's does) or
a type object (its `showable` may dispatch on `Type{T}`) is asked every time.
"""
function bundle_mimes(@nospecialize(x))
    x isa Type && return find_bundle_mimes(x)
    T = typeof(x)
    key = (Base.get_world_counter(), hash(REGISTERED_MIMES), hash(REGISTERED_JSON_MIMES))
    table = BUNDLE_TABLE[]
    if table.key == key
        known = get(table.mimes, objectid(T), nothing)
        known !== nothing && known[1] === T && return known[2]
    end
    found = find_bundle_mimes(x)
    if all(m -> showable_by_type(m, T), candidate_mimes())
        mimes = table.key == key ? copy(table.mimes) : empty(table.mimes)
        mimes[objectid(T)] = (T, found)
        BUNDLE_TABLE[] = BundleTable(key, mimes)   # two threads at once: one's entry is lost
    end
    return found
end

function find_bundle_mimes(@nospecialize(x))
    found = BundleMimes()
    for (groups, json) in ((RICH_MIMES, false), (JSON_MIMES, true), (REGISTERED_MIMES, false),
                           (REGISTERED_JSON_MIMES, true))
        for group in groups
            m = first_showable(group, x)
            (m === nothing || any(f -> f[1] == m, found)) || push!(found, (m, json))
        end
    end
    return found
end

function candidate_mimes()
    candidates = MIME[]
    for groups in (RICH_MIMES, JSON_MIMES, REGISTERED_MIMES, REGISTERED_JSON_MIMES)
        for group in groups
            group isa MIME ? push!(candidates, group) : append!(candidates, group)
        end
    end
    return candidates
end

"""Whether `showable(m, ::T)` is Base's, which asks the type only (base/multimedia.jl)."""
showable_by_type(m::MIME, T::Type) =
    which(showable, Tuple{typeof(m),T}) === which(showable, Tuple{MIME,Any})

"""
    JKernel.register_mime(mime)
    JKernel.register_mime([mime1, mime2, ...])
    JKernel.register_jsonmime(mime)

Add a MIME type, or a group of which a value sends the first it can show, to every bundle
for the rest of the session; a JSON type's data travels as JSON. The same as IJulia's (in
ijulia.jl), which packages call.
"""
register_mime(x) = IJulia.register_mime(x)
register_jsonmime(x) = IJulia.register_jsonmime(x)

first_showable(m::MIME, @nospecialize(x)) = showable(m, x) ? m : nothing
function first_showable(group::Vector{MIME}, @nospecialize(x))
    for m in group
        showable(m, x) && return m
    end
    return nothing
end

"""
    jupyter_string(mime, x, text=false) -> String

`x` shown as `mime`, as a Jupyter bundle holds it: text for a text type (or with `text`),
base64 for a binary one. A string that the type cannot show is the data already, and so is a
byte vector for a binary type (IJulia src/inline.jl, `limitstringmime` and `israwtext`).
"""
function jupyter_string(m::MIME, @nospecialize(x), text::Bool = false)
    if text || istextmime(m)
        x isa AbstractString && !showable(m, x) && return String(x)
        return render(m, x)
    end
    x isa AbstractVector{UInt8} && return base64encode(x)
    shown = render(m, x)
    return string(m) in BINARY_MIMES ? shown : base64encode(shown)   # render's base64 types
end

"""
    mime_bundle(x, mime)

The bundle `display(mime, x)` shows. As Julia's `display` documents, a string for a text MIME
type and a byte vector for a binary one are data already in that format; anything else must
be `showable(mime, x)`, or this throws the MethodError the REPL would.
"""
function mime_bundle(@nospecialize(x), mime::MIME)
    m = string(mime)
    if x isa AbstractString && istextmime(mime)
        return Dict{String,Any}(m => String(x))
    elseif x isa AbstractVector{UInt8} && !istextmime(mime)
        return Dict{String,Any}(m => base64encode(x))
    end
    showable(mime, x) || throw(MethodError(Base.display, (mime, x)))   # Base tries the next display
    data = Dict{String,Any}(m => jupyter_string(mime, x))
    m == "text/plain" || (data["text/plain"] = plain_text(x))
    return data
end

"""
    output_context(io) -> IOContext

The context every MIME a cell returns or displays is rendered in, IJulia's `InlineIOContext`
(JuliaLang/IJulia.jl src/inline.jl): `:limit => true`, so that a package's `show` prints its
short form (DataFrames' HTML shows 25 rows instead of all of them); `:jupyter => true`, which
packages read to tell a notebook (Luxor's text/plain, PlotlyLight's text/html); `:color` as
the kernel's stdout has it (IJulia always sets `true`, and its kernelspec runs Julia with
`--color=yes`, as ours does by default; `--no-color` makes every output plain here), and
`:module => Main` (short type names). The size is Julia's default for a stream that is no
terminal, `LINES` by `COLUMNS` from the environment, which the kernel sets as IJulia does
(`set_display_size!`: 30 by 80 unless the user's environment names a size).
"""
output_context(io::IO) = IOContext(io, :limit => true, :color => COLOR[], :jupyter => true,
                                   :module => Main)

"""The data of `x` as `mime` in a display bundle: base64 for a binary type, else text."""
function render(m::MIME, @nospecialize(x))
    # No closure over `x`: its type would be one per type shown (`@nospecialize` or not), and
    # `sprint` compiled for each.
    buf = IOBuffer()
    show(output_context(buf), m, x)
    return string(m) in BINARY_MIMES ? base64encode(take!(buf)) : String(take!(buf))
end

plain_text(@nospecialize(x)) = render(MIME("text/plain"), x)

"""Send a display message of the running (or last) evaluation, after the output before it."""
function send_display(msg::Dict{String,Any})
    c = output_ctx()   # in the caller's task: on thread one it would be the server's
    on_thread_one(() -> send_display_here(msg, c))
end
function send_display_here(msg::Dict{String,Any}, c::Union{Nothing,EvalCtx} = nothing)
    id = frame_id(c)
    id == 0 && return
    payload = json(msg)
    if length(payload) > RICH_CAP
        data = msg["data"]
        msg["data"] = Dict{String,Any}("text/plain" => capped(get(data, "text/plain", ""),
            RESULT_CAP) * "\n[rich output of $(length(payload)) bytes dropped: over $RICH_CAP]")
        payload = json(msg)
    end
    server_section(c) do
        send_frame(FrameKind.DSP, string(id), payload; mark = drain_output())
    end
end

"""The evaluation a frame of `c`'s is about: the beside one, else the running (or last) cell."""
frame_id(c::Union{Nothing,EvalCtx}) =
    c === nothing ? (CURRENT[] == 0 ? LAST_ID[] : CURRENT[]) : c.id

"""
    server_section(f, ctx=nothing)

Run `f` with interrupts held back; an interrupt that arrived meanwhile is thrown after. `ctx`
is the beside evaluation whose task this is (its own interrupt state), or `nothing`.
"""
function server_section(f, c::Union{Nothing,EvalCtx} = nothing)
    was = in_user(c)
    set_in_user!(c, false)
    try
        disable_sigint(f)
    finally
        set_in_user!(c, was)
    end
    if was && take_pending_interrupt!(c)
        throw(InterruptException())
    end
end

function display_message(@nospecialize(x), mime, display_id, update::Bool)
    data = mime === nothing ? mime_bundle(x) : mime_bundle(x, MIME(string(mime)))
    msg = Dict{String,Any}("data" => data, "metadata" => Dict{String,Any}(), "update" => update)
    display_id === nothing || (msg["transient"] = Dict{String,Any}("display_id" => string(display_id)))
    send_display(msg)
end

Base.display(::KernelDisplay, x) = (display_message(x, nothing, nothing, false); nothing)
Base.display(::KernelDisplay, m::MIME, x) = (display_message(x, m, nothing, false); nothing)
Base.display(d::KernelDisplay, m::AbstractString, x) = display(d, MIME(m), x)
Base.displayable(::KernelDisplay, ::MIME) = true

"""
    JKernel.display(x; display_id=nothing, mime=nothing) -> display_id

Show `x` in the running cell, tagged with `display_id` (a fresh one if `true`) so that
[`update_display`](@ref) can replace it later.
See https://jupyter-client.readthedocs.io/en/latest/messaging.html#display-data
"""
function display(x; display_id = nothing, mime = nothing)
    if display_id === true
        DISPLAY_COUNTER[] += 1
        display_id = string("jkernel-", getpid(), "-", DISPLAY_COUNTER[])
    end
    display_message(x, mime, display_id, false)
    return display_id
end

"""
    JKernel.update_display(x; display_id, mime=nothing)

Replace what an earlier `JKernel.display(...; display_id)` showed, wherever it is.
"""
update_display(x; display_id, mime = nothing) =
    (display_message(x, mime, string(display_id), true); nothing)

"""
    JKernel.clear_output(wait=false)

Clear the output of the running cell; with `wait=true`, only when new output arrives.
"""
function clear_output(wait::Bool = false)
    c = output_ctx()
    on_thread_one(() -> clear_output_here(wait, c))
end
function clear_output_here(wait::Bool, c::Union{Nothing,EvalCtx} = nothing)
    id = frame_id(c)
    id == 0 && return
    server_section(c) do
        send_frame(FrameKind.CLR, string(id, wait ? " 1" : " 0"); mark = drain_output())
    end
    nothing
end
