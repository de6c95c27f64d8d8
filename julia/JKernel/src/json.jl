# json.jl: the JSON writer for frame payloads (INF, DSP, VAL, ERR, ANS, PAY).
#
# Standard library only, so no JSON package: this writes the few shapes the server builds
# (dicts, vectors, tuples, strings, numbers, booleans, nothing) and nothing more. Control
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
