"""olmoablate.spec"""
