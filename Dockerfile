# The signoff image: `signoff api` (default) or `signoff worker` (see docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 SIGNOFF_HOME=/data
COPY pyproject.toml README.md ./
COPY engine ./engine
COPY activities ./activities
COPY workflows ./workflows
COPY service ./service
COPY api ./api
COPY signoff ./signoff
COPY examples ./examples
RUN pip install --no-cache-dir . && mkdir -p /data
EXPOSE 8000
CMD ["signoff", "api"]
