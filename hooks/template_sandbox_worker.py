"""Renders one template, in a process of its own (started by hooks/template_sandbox.py).

Run as ``python -I template_sandbox_worker.py <cpu seconds> <memory bytes>``: it reads
``{"template", "values", "limit"}`` as JSON on stdin and writes ``{"text"}``
or ``{"error"}`` as JSON on stdout. It imports nothing of nodewarden, so it
runs in isolated mode. Before it reads the template it caps its own CPU time
and address space: a template may loop or build huge strings, and it is
this process that runs out, not the hook server. Output is streamed and
stopped as soon as it passes ``limit`` bytes.
"""
import json
import resource
import sys


def _limit(cpu_seconds: int, memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


def render(template: str, values: dict, limit: int) -> dict:
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment

    # Templates come from a spec: the sandbox keeps them from reaching Python internals.
    env = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)
    chunks, size = [], 0
    try:
        for chunk in env.from_string(template).generate(**values):
            size += len(chunk.encode())
            if size > limit:
                return {"error": f"renders to more than {limit} bytes"}
            chunks.append(chunk)
    except MemoryError:
        return {"error": "needs more memory than a template may use"}
    except RecursionError:
        return {"error": "nests too deeply"}
    except jinja2.TemplateError as exc:
        return {"error": f"does not render: {exc}"[:500]}
    except Exception as exc:  # noqa: BLE001 - arithmetic and the like inside the template
        return {"error": f"does not render: {type(exc).__name__}: {exc}"[:500]}
    return {"text": "".join(chunks)}


def main() -> None:
    _limit(int(sys.argv[1]), int(sys.argv[2]))
    request = json.loads(sys.stdin.read())
    sys.stdout.write(json.dumps(render(request["template"], request["values"], int(request["limit"]))))


if __name__ == "__main__":
    main()
