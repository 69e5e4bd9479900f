"""olmoablate.models"""
