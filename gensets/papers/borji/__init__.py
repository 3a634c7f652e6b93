"""Borji (2022): the recognition and VQA builders (recognition.py, vqa.py) and their reports
(recognition_report.py, vqa_report.py)."""
