# queries.jl: completion, inspection and is_complete (QRY frames, answered as ANS).

"""Byte index of the cursor after `cursor` code points of `code` (0 at the start)."""
cursor_index(code::String, cursor::Int) =
    cursor <= 0 ? 0 : min(nextind(code, 0, min(cursor, length(code))), lastindex(code))

"""Code points of `code` before byte index `i`: 0 at or before the start (ranges like 0:-1)."""
function codepoints_before(code::String, i::Int)
    i <= 1 && return 0
    i > ncodeunits(code) && return length(code)
    return length(code, 1, prevind(code, i))
end

"""
    eval_help(ex)

Evaluate a help expression (`REPL.helpmode`) in a hard scope. Since Julia 1.11 it is a block
that assigns `docs` (`quote docs = Markdown.insert_hlines(...); ... end` in
stdlib/REPL/src/docview.jl, release-1.12 and master; 1.5.3's and release-1.10's is a plain
call): at top level that would overwrite, or fail on, a user's global `docs`.
"""
eval_help(ex) = Core.eval(Main, Expr(:let, Expr(:block), ex))

function answer_query(op::String, code::String, cursor::Int)
    cursor = min(cursor, length(code))
    if op == "complete"
        pos = cursor_index(code, cursor)
        comps, range, _ = REPL.REPLCompletions.completions(code, pos)
        matches = unique!([completion_string(c) for c in comps])
        # No match comes with an empty range such as 0:-1 (inside a string with an unknown path)
        start = isempty(matches) ? cursor : codepoints_before(code, first(range))
        return Dict("matches" => matches, "cursor_start" => start, "cursor_end" => cursor)
    elseif op == "inspect"
        name = identifier_at(code, cursor)
        isempty(name) && return Dict("found" => false)
        md = try
            eval_help(REPL.helpmode(IOBuffer(), name))
        catch err
            err isa InterruptException && rethrow()
            return Dict("found" => false)
        end
        plain = sprint(show, MIME("text/plain"), md; context = :color => false)
        found = documentation_found(md)
        data = Dict("text/plain" => plain, "text/markdown" => sprint(show, MIME("text/markdown"), md))
        return Dict("found" => found, "data" => data)
    elseif op == "is_complete"
        status = syntax_status(code)
        status === nothing && (status = parsed_status(code))
        status == "incomplete" && return Dict("status" => status, "indent" => next_indent(code))
        return Dict("status" => status)
    elseif op == "comm_target"
        # Whether a comm_open to this target would be taken (comms.jl), asked while a cell
        # runs: the kernel closes one nobody takes at once instead of queueing it.
        return Dict("known" => knows_target(Symbol(code)))
    end
    return Dict("error" => "unknown query $(repr(op))")
end

"""is_complete's answer from the parse of `code` as a cell (where `syntax_status` has none)."""
function parsed_status(code::String)
    ex = parse_cell(code, "cell")
    if ex isa Expr && ex.head === :incomplete
        return "incomplete"
    elseif ex isa Expr && (ex.head === :error || ex.head === :toplevel &&
                            any(a -> a isa Expr && a.head in (:error, :incomplete), ex.args))
        any(a -> a isa Expr && a.head === :incomplete, ex.args) && return "incomplete"
        return "invalid"
    end
    return "complete"
end

is_ident_char(c::Char) = Base.is_id_char(c) || c == '.' || c == '!' || c == '@'

function identifier_at(code::String, cursor::Int)
    chars = collect(code)
    lo = cursor
    while lo > 0 && is_ident_char(chars[lo])
        lo -= 1
    end
    hi = cursor
    while hi < length(chars) && is_ident_char(chars[hi+1])
        hi += 1
    end
    return strip(String(chars[lo+1:hi]), '.')
end

const BLOCK_OPENERS = r"^\s*(function|macro|module|baremodule|struct|mutable struct|abstract type|primitive type|if|elseif|else|for|while|let|begin|quote|try|catch|finally|do)\b|\b(do|begin)\s*(\|[^|]*\|)?\s*$|[\(\[\{,=]\s*$"

function next_indent(code::String)
    lines = [l for l in split(code, '\n') if !isempty(strip(l))]
    isempty(lines) && return ""
    last = lines[end]
    base = last[1:prevind(last, something(findfirst(c -> !isspace(c), last), 1))]
    return occursin(BLOCK_OPENERS, last) ? base * "    " : base
end
