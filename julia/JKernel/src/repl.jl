# repl.jl: the REPL's cell semantics: history (In/Out), hooks, `]` and `;` modes, soft scope.
# What differs by Julia version (ans/err, Pkg, ^C as a cancellation) is in compat.jl.

# `In`, `Out`, the hooks and SOFTSCOPE are in state.jl.

run_hooks(hooks) = foreach(Base.invokelatest, copy(hooks))

"""The execution count of a cell named `In[n]` (what the kernel sends), else `id`."""
function cell_number(name::String, id::Int)
    m = match(r"^In\[([0-9]{1,9})\]$", name)
    return m === nothing ? id : parse(Int, m.captures[1])
end

"""
    mode_line(code) -> Union{String,Nothing}

The one command of a `?`, `]` or `;` cell, as IJulia finds it: blank and `#` comment lines are
ignored, and exactly one line must remain.
"""
function mode_line(code::String)
    found = nothing
    for line in eachline(IOBuffer(code))
        stripped = strip(line)
        (isempty(stripped) || startswith(stripped, '#')) && continue
        found === nothing || return nothing
        found = String(stripped)
    end
    return found !== nothing && first(found) in ('?', ']', ';') ? found : nothing
end

"""Evaluate a cell: a REPL mode command, or Julia code through the backend's AST transforms."""
function eval_cell(mod::Module, code::String, filename::String)
    line = mode_line(code)
    if line !== nothing
        rest = strip(line[nextind(line, 1):end])
        # help as the cell's value, saved with the notebook as IJulia does; apropos prints
        first(line) == '?' && return eval_help(REPL.helpmode(stdout, String(rest)))
        first(line) == ']' && return pkg_mode(rest)
        return shell_mode(mod, rest)
    end
    ast = local_ijulia_imports(parse_cell(code, filename))
    # BACKEND is unset only in the precompile workload, which runs cells before serve does.
    for f in (isassigned(BACKEND) ? BACKEND[].ast_transforms : Any[])
        ast = Base.invokelatest(f, ast)
    end
    return Core.eval(mod, ast)
end

"""`] cmd`: Pkg's REPL mode against the active project. Pkg loads on first use (~1 s)."""
pkg_mode(cmd::AbstractString) = Base.invokelatest(pkg_command, load_pkg(), String(cmd))

"""
    shell_mode(mod, line)

`;cmd`: the REPL's shell mode, with `\$` interpolation from `mod` and `cd` changing the kernel's
directory. The command runs through \$JULIA_SHELL / \$SHELL like the REPL's (base/client.jl,
`repl_cmd`), with its output captured at the fd level; an interrupt ends the command too,
as Ctrl-C at the REPL does by signalling its process group.
"""
function shell_mode(mod::Module, line::AbstractString)
    cmd = Core.eval(mod, :(Base.cmd_gen($(Base.shell_parse(String(line))[1]))))
    (isempty(cmd.exec) || cmd.exec[1] == "cd") && return Base.repl_cmd(cmd, stdout)
    cmd.exec .= expanduser.(cmd.exec)
    cmd = through_user_shell(cmd)
    # A process group of its own (detach), so that an interrupt can end the shell and what it
    # started, as Ctrl-C does to a terminal's foreground group.
    proc = run(pipeline(Cmd(ignorestatus(cmd); detach = true);
                        stdin = devnull, stdout = stdout, stderr = stderr); wait = false)
    try
        wait(proc)
    catch
        quietly() do
            signal_group(proc, 2)                         # SIGINT
            timedwait(() -> !process_running(proc), 2.0)
            process_running(proc) && signal_group(proc, 9)  # SIGKILL
        end
        rethrow()
    end
    nothing
end

signal_group(proc, sig) = Sys.iswindows() ? kill(proc, sig) :
    ccall(:kill, Cint, (Cint, Cint), -getpid(proc), sig)

"""
    local_ijulia_imports(ast)

`using IJulia` / `import IJulia` in a cell bind the kernel's own `IJulia` module (see
`IJulia` below) instead of loading the package: in Main the name is already taken, and the
package's functions need a kernel of its own.
"""
function local_ijulia_imports(ast)
    ast isa Expr || return ast
    if ast.head === :toplevel || ast.head === :block
        return Expr(ast.head, map(local_ijulia_imports, ast.args)...)
    elseif ast.head in (:using, :import)
        return Expr(ast.head, map(local_ijulia_path, ast.args)...)
    end
    return ast
end
local_ijulia_path(p) = p == Expr(:., :IJulia) ? Expr(:., :., :IJulia) :
    (p isa Expr && p.head === :(:)) ? Expr(:(:), local_ijulia_path(p.args[1]), p.args[2:end]...) : p
