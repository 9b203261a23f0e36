"""prefcall.profiles"""
