"""A company handbook's vacation section, as a new user wrote it: the answerer's tests of question kinds and of
why a question is declined read the same text."""

VACATION = """## Vacation policy

Full-time employees receive 25 days of paid vacation per calendar year. Part-time employees receive vacation pro rata \
to their contracted hours.
Up to 5 unused vacation days may be carried over into the next year; carried-over days expire on March 31.
Vacation requests must be submitted in the HR portal at least two weeks in advance. Requests for more than 10 \
consecutive working days need approval from your department head.

## Sick leave

If you are sick, notify your manager before 10:00 on the first day of absence. A doctor's note is required from the \
fourth consecutive day of sickness.
"""
