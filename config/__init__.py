"""Project configuration. Importing the Celery app here binds `shared_task` to it in every process."""

from config.celery import app as celery_app

__all__ = ["celery_app"]
