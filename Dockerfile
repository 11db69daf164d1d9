# syntax=docker/dockerfile:1
# Build stage: the hook server's pinned runtime (requirements/runtime.txt, no
# test tools) and nodewarden itself.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY requirements/runtime.txt pyproject.toml ./
COPY hooks ./hooks
RUN python -m venv /opt/nodewarden \
 && /opt/nodewarden/bin/pip install --no-cache-dir --upgrade pip==25.3 \
 && /opt/nodewarden/bin/pip install --no-cache-dir -r runtime.txt \
 && /opt/nodewarden/bin/pip install --no-cache-dir --no-deps .

# Runtime stage: the virtualenv only, as a non-root user, read-only friendly.
FROM python:3.11-slim-bookworm
RUN groupadd --system --gid 10001 nodewarden \
 && useradd --system --uid 10001 --gid nodewarden --no-create-home nodewarden
COPY --from=build /opt/nodewarden /opt/nodewarden
COPY templates /opt/nodewarden/templates
COPY gunicorn.conf.py /etc/nodewarden/gunicorn.conf.py
ENV PATH=/opt/nodewarden/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PROMETHEUS_MULTIPROC_DIR=/tmp/metrics \
    NODEWARDEN_TEMPLATES_DIR=/opt/nodewarden/templates
USER 10001:10001
# 8443: the hooks (HTTPS when a certificate is mounted); 9090: /metrics, /healthz, /readyz (plain HTTP)
EXPOSE 8443 9090
ENTRYPOINT ["gunicorn", "--config", "/etc/nodewarden/gunicorn.conf.py", "hooks.app:create_app()"]
