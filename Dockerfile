FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
# bubblewrap sandboxes the MCP host's stdio servers (no network, read-only root). Where the container
# may not create namespaces the host refuses to start them in production (docker-compose.yml allows it).
# Node and npm run npm MCP servers, installed at `mcp_upstream add --npm` (never by a child).
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap nodejs npm && rm -rf /var/lib/apt/lists/*
COPY . .
# Settings refuse production mode without real secrets; these placeholders exist only for this build step.
RUN DEBUG=False SECRET_KEY=collectstatic-only REDIS_URL=redis://unused:6379/0 \
    TOOLGATE_ENCRYPTION_KEYS=build:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= \
    python manage.py collectstatic --noinput
# The MCP host runs as a user of its own (docker-compose.yml): its children never share a uid with web or workers.
RUN useradd --create-home toolgate && useradd --create-home toolgate-mcp \
    && mkdir -p var/mcp_host/packages && chown -R toolgate var && chown -R toolgate-mcp var/mcp_host \
    && chown toolgate var/mcp_host/packages
USER toolgate
EXPOSE 8000
# Serve behind a buffering reverse proxy (config/nginx.conf), never directly: docs/operating.md, "Production".
# gunicorn binds 127.0.0.1 by default; docker-compose.yml adds `--bind 0.0.0.0:8000` on the stack's network.
CMD ["gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi"]
