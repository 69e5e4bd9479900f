"""olmoablate.train"""
