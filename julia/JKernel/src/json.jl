# json.jl: the JSON writer for frame payloads (INF, DSP, VAL, ERR, ANS, PAY, CMM), and the
# reader for the JSON that comes with a COM frame.
#
# Standard library only, so no JSON package: this writes the few shapes the server builds and
# comm data holds (dicts, vectors, tuples, strings, symbols, numbers, booleans, nothing), and
# says which type it cannot write rather than guess. Control
# characters are escaped as RFC 8259 requires; an invalid character becomes U+FFFD, so a payload
# is always valid UTF-8. A non-finite float, which JSON cannot hold, is null.

function json(io::IO, x::AbstractDict)
    print(io, '{')
    first = true
    for (k, v) in x
        first || print(io, ',')
        first = false
        json(io, string(k))
        print(io, ':')
        json(io, v)
    end
    print(io, '}')
end
function json(io::IO, x::Union{AbstractVector,Tuple})
    print(io, '[')
    for (i, v) in enumerate(x)
        i > 1 && print(io, ',')
        json(io, v)
    end
    print(io, ']')
end
json(io::IO, x::Bool) = print(io, x ? "true" : "false")
json(io::IO, x::Integer) = print(io, x)
json(io::IO, x::AbstractFloat) = isfinite(x) ? print(io, Float64(x)) : print(io, "null")
json(io::IO, ::Nothing) = print(io, "null")
json(io::IO, x::Symbol) = json(io, string(x))
json(io::IO, x) = throw(ArgumentError(
    "cannot send a value of type $(typeof(x)) as JSON: use dicts, vectors, strings, numbers, " *
    "booleans and nothing"))
function json(io::IO, s::AbstractString)
    print(io, '"')
    for c in s
        if !isvalid(c)
            print(io, '\ufffd')
        elseif c == '"'
            print(io, "\\\"")
        elseif c == '\\'
            print(io, "\\\\")
        elseif c == '\n'
            print(io, "\\n")
        elseif c < ' ' || c == '\x7f'
            print(io, "\\u", string(UInt32(c); base = 16, pad = 4))
        else
            print(io, c)
        end
    end
    print(io, '"')
end

"""
    json(x) -> Vector{UInt8}

`x` as JSON text, the payload of a frame.
"""
json(x) = (io = IOBuffer(); json(io, x); take!(io))

"""
    parse_json(text) -> Any

JSON text as Julia values: an object as a `Dict{String,Any}`, an array as a `Vector{Any}`, an
integer as an `Int` (a `Float64` when it does not fit), any other number as a `Float64`, null
as `nothing`. Throws an ArgumentError that names the byte where the text stops being JSON.
"""
function parse_json(text::AbstractString)
    b = codeunits(String(text))
    value, i = parse_json_value(b, skip_json_space(b, 1))
    i = skip_json_space(b, i)
    i <= length(b) && json_error(i, "text after the value")
    return value
end

json_error(i::Int, what::String) = throw(ArgumentError("not JSON at byte $i: $what"))

function skip_json_space(b, i::Int)
    while i <= length(b) && (b[i] == 0x20 || b[i] == 0x09 || b[i] == 0x0a || b[i] == 0x0d)
        i += 1
    end
    return i
end

function parse_json_value(b, i::Int)
    i > length(b) && json_error(i, "the text ends where a value should be")
    c = b[i]
    c == UInt8('{') && return parse_json_object(b, skip_json_space(b, i + 1))
    c == UInt8('[') && return parse_json_array(b, skip_json_space(b, i + 1))
    c == UInt8('"') && return parse_json_string(b, i + 1)
    c == UInt8('t') && return json_word(b, i, "true", true)
    c == UInt8('f') && return json_word(b, i, "false", false)
    c == UInt8('n') && return json_word(b, i, "null", nothing)
    (c == UInt8('-') || UInt8('0') <= c <= UInt8('9')) && return parse_json_number(b, i)
    json_error(i, "unexpected character $(repr(Char(c)))")
end

function json_word(b, i::Int, word::String, value)
    n = ncodeunits(word)
    i + n - 1 <= length(b) && all(k -> b[i+k-1] == codeunit(word, k), 1:n) ||
        json_error(i, "expected $word")
    return value, i + n
end

function parse_json_object(b, i::Int)
    d = Dict{String,Any}()
    i <= length(b) && b[i] == UInt8('}') && return d, i + 1
    while true
        i <= length(b) && b[i] == UInt8('"') || json_error(i, "expected a key")
        key, i = parse_json_string(b, i + 1)
        i = skip_json_space(b, i)
        i <= length(b) && b[i] == UInt8(':') || json_error(i, "expected ':'")
        d[key], i = parse_json_value(b, skip_json_space(b, i + 1))
        i = skip_json_space(b, i)
        i <= length(b) && b[i] == UInt8('}') && return d, i + 1
        i <= length(b) && b[i] == UInt8(',') || json_error(i, "expected ',' or '}'")
        i = skip_json_space(b, i + 1)
    end
end

function parse_json_array(b, i::Int)
    v = Any[]
    i <= length(b) && b[i] == UInt8(']') && return v, i + 1
    while true
        value, i = parse_json_value(b, i)
        push!(v, value)
        i = skip_json_space(b, i)
        i <= length(b) && b[i] == UInt8(']') && return v, i + 1
        i <= length(b) && b[i] == UInt8(',') || json_error(i, "expected ',' or ']'")
        i = skip_json_space(b, i + 1)
    end
end

"""The character a one-letter JSON escape (after the backslash) stands for, or nothing."""
function json_escape(c::UInt8)
    c == UInt8('"') && return '"'
    c == UInt8('\\') && return '\\'
    c == UInt8('/') && return '/'
    c == UInt8('b') && return '\b'
    c == UInt8('f') && return '\f'
    c == UInt8('n') && return '\n'
    c == UInt8('r') && return '\r'
    c == UInt8('t') && return '\t'
    return nothing
end

function parse_json_string(b, i::Int)   # i: just after the opening quote
    io = IOBuffer()
    while true
        i > length(b) && json_error(i, "unterminated string")
        c = b[i]
        if c == UInt8('"')
            return String(take!(io)), i + 1
        elseif c != UInt8('\\')
            write(io, c)
            i += 1
        elseif i + 1 <= length(b) && b[i+1] == UInt8('u')
            u, i = json_hex4(b, i + 2)
            if 0xd800 <= u <= 0xdbff && i + 5 <= length(b) && b[i] == UInt8('\\') &&
               b[i+1] == UInt8('u')
                low, j = json_hex4(b, i + 2)
                if 0xdc00 <= low <= 0xdfff   # a surrogate pair: one character
                    u, i = 0x10000 + ((u - 0xd800) << 10) + (low - 0xdc00), j
                end
            end
            print(io, isvalid(Char, u) ? Char(u) : '\ufffd')
        else
            ch = i + 1 <= length(b) ? json_escape(b[i+1]) : nothing
            ch === nothing && json_error(i, "bad escape")
            print(io, ch)
            i += 2
        end
    end
end

function json_hex4(b, i::Int)
    i + 3 <= length(b) || json_error(i, "short \\u escape")
    u = tryparse(UInt32, String(b[i:i+3]); base = 16)
    u === nothing && json_error(i, "bad \\u escape")
    return u, i + 4
end

function parse_json_number(b, i::Int)
    j = i
    while j <= length(b) && (UInt8('0') <= b[j] <= UInt8('9') || b[j] in b"+-.eE")
        j += 1
    end
    text = String(b[i:j-1])
    n = tryparse(Int, text)
    n === nothing || return n, j
    x = tryparse(Float64, text)
    x === nothing && json_error(i, "bad number $(repr(text))")
    return x, j
end
